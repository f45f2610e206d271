"""Alert sinks: one module per kind of receiver, each behind the `Sink` interface of `base`.

This registry is the only place that knows the formats: everything else asks the webhook's sink
what it sends and hears (`sink_for`). To add a sink, see CONTRIBUTING.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.config.webhooks import WebhookConfig
from monitor.core.states import AlertEvent
from monitor.notify.sinks.alertmanager import Alertmanager
from monitor.notify.sinks.base import Sink
from monitor.notify.sinks.pagerduty import PagerDuty
from monitor.notify.sinks.slack import SlackWebhook
from monitor.notify.sinks.standard import StandardWebhook

SINKS: dict[str, type[Sink]] = {
    sink.format: sink for sink in (StandardWebhook, SlackWebhook, Alertmanager, PagerDuty)
}
"""Every sink by its `format` (the `[[webhooks]] format` key)."""


def sink_for(webhook: WebhookConfig) -> Sink:
    """The sink a webhook's format names, ready to send: its secrets read from the environment."""
    return SINKS[webhook.format](webhook)


def render(webhook: WebhookConfig, payload: Mapping[str, Any]) -> str:
    """The body text the webhook's sink receives for one alert event, as stored in the outbox."""
    return SINKS[webhook.format].render(payload, webhook)


def hears(webhook: WebhookConfig, event: AlertEvent) -> bool:
    """Whether the webhook's sink is told of `event` (without reading its secrets)."""
    return event in SINKS[webhook.format].hears


def reposts_open_alerts(webhook: WebhookConfig) -> bool:
    return SINKS[webhook.format].reposts_open_alerts


__all__ = ["SINKS", "Sink", "hears", "render", "reposts_open_alerts", "sink_for"]
