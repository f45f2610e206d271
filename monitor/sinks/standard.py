"""The standard webhook: docs/contract.md section 9's body as it is, signed per Standard Webhooks."""

from __future__ import annotations

from monitor.sinks.base import Sink, WebhookConfig


class StandardWebhook(Sink[WebhookConfig]):
    format = "standard"
