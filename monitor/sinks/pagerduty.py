"""PagerDuty's Events API v2: trigger, acknowledge and resolve, tied together by `dedup_key`.

The routing key is a secret: the stored event leaves it out, and it is added as each event is sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from monitor.core.states import AlertEvent
from monitor.sinks.base import Sink, WebhookConfig, clip, static_labels

SEVERITY = {"critical": "critical", "high": "error", "medium": "warning", "low": "info", "info": "info"}
"""PagerDuty's severities for ours (docs/contract.md section 11)."""
ACTION = {
    AlertEvent.OPENED: "trigger",
    AlertEvent.ACKNOWLEDGED: "acknowledge",
    AlertEvent.RESOLVED: "resolve",
}
SUMMARY_LIMIT = 1024
"""PagerDuty's limit on `payload.summary`."""
EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


class PagerDutyWebhookConfig(WebhookConfig):
    """PagerDuty's Events API v2: the integration's routing key comes from a variable, added to each
    event as it is sent (never stored in the outbox); static labels go into `custom_details`."""

    format: Literal["pagerduty"] = "pagerduty"
    url: str = EVENTS_URL
    routing_key_env: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return static_labels(labels, frozenset({"alert", "findings"}))


class PagerDuty(Sink[PagerDutyWebhookConfig]):
    format = "pagerduty"
    settings = PagerDutyWebhookConfig
    hears = frozenset(ACTION)

    def __init__(self, webhook: PagerDutyWebhookConfig) -> None:
        super().__init__(webhook)
        self.routing_key_env = webhook.routing_key_env
        self.routing_key = os.environ.get(webhook.routing_key_env, "")

    @classmethod
    def body(cls, payload: Mapping[str, Any], webhook: PagerDutyWebhookConfig) -> dict[str, Any]:
        """An event without its `routing_key`: trigger (with the details and the webhook's static
        labels), acknowledge or resolve."""
        alert = payload["alert"]
        event: dict[str, Any] = {
            "event_action": ACTION[AlertEvent(payload["type"])],
            "dedup_key": alert["key"],  # the alert id, scoped by the installation (docs/integrations.md)
        }
        if event["event_action"] != "trigger":
            return event
        subject = alert["server"] + (f" / {alert['tool']}" if alert["tool"] else "")
        event["payload"] = {
            "summary": clip(f"[{alert['rule']}] {subject}: {alert['message']}", SUMMARY_LIMIT),
            "source": alert["server"],
            "severity": SEVERITY[alert["severity"]],
            "timestamp": alert["opened_at"],
            "component": alert["tool"] or alert["server"],
            "group": alert["server"],
            "class": alert["rule"],
            "custom_details": {**webhook.labels, "alert": alert, "findings": payload.get("findings", [])},
        }
        event["client"] = "drift-monitor"
        event["client_url"] = alert["url"]
        event["links"] = [{"href": alert["url"], "text": f"drift-monitor alert {alert['id']}"}]
        return event

    def content(self, stored: str) -> bytes:
        """The stored event with its routing key, as sent (ASCII JSON, like every body)."""
        if not self.routing_key:
            raise LookupError(f"{self.routing_key_env} (the PagerDuty routing key) is not set")
        return json.dumps(
            {"routing_key": self.routing_key, **json.loads(stored)}, separators=(",", ":")
        ).encode()
