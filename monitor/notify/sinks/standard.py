"""The standard webhook: docs/contract.md section 9's body as it is, signed per Standard Webhooks."""

from __future__ import annotations

from monitor.notify.sinks.base import Sink


class StandardWebhook(Sink):
    format = "standard"
