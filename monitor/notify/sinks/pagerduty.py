"""PagerDuty's Events API v2: trigger, acknowledge and resolve, tied together by `dedup_key`.

The routing key is a secret: the stored event leaves it out, and it is added as each event is sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from monitor.config.webhooks import PagerDutyWebhookConfig, WebhookConfig
from monitor.core.states import AlertEvent
from monitor.notify.sinks.base import Sink, clip

SEVERITY = {"critical": "critical", "high": "error", "medium": "warning", "low": "info", "info": "info"}
"""PagerDuty's severities for ours (docs/contract.md section 11)."""
ACTION = {
    AlertEvent.OPENED: "trigger",
    AlertEvent.ACKNOWLEDGED: "acknowledge",
    AlertEvent.RESOLVED: "resolve",
}
SUMMARY_LIMIT = 1024
"""PagerDuty's limit on `payload.summary`."""


class PagerDuty(Sink):
    format = "pagerduty"
    settings = PagerDutyWebhookConfig
    hears = frozenset(ACTION)

    def __init__(self, webhook: WebhookConfig) -> None:
        super().__init__(webhook)
        assert isinstance(webhook, PagerDutyWebhookConfig)  # checked by Sink.__init__
        self.routing_key_env = webhook.routing_key_env
        self.routing_key = os.environ.get(webhook.routing_key_env, "")

    @classmethod
    def body(cls, payload: Mapping[str, Any], webhook: WebhookConfig) -> dict[str, Any]:
        """An event without its `routing_key`: trigger (with the details and the webhook's static
        labels), acknowledge or resolve."""
        assert isinstance(webhook, PagerDutyWebhookConfig)
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
