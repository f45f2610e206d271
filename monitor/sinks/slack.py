"""A Slack incoming webhook: one message per alert event, with a link to the alert's page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.core.states import AlertEvent
from monitor.core.text import make_visible
from monitor.sinks.base import Sink, WebhookConfig, clip


class SlackWebhook(Sink[WebhookConfig]):
    format = "slack"

    @classmethod
    def body(cls, payload: Mapping[str, Any], webhook: WebhookConfig) -> dict[str, Any]:
        """Server-controlled text is made visible and escaped, so it cannot mention, link or hide."""
        alert = payload["alert"]
        verb = "opened"
        if payload["type"] == AlertEvent.RESOLVED:
            verb = f"resolved ({make_visible(payload.get('cause') or 'the condition cleared')})"
        subject = alert["server"] + (f" / {alert['tool']}" if alert["tool"] else "")
        title = clip(f"[{alert['severity'].upper()}] {alert['rule']} {verb} on {make_visible(subject)}", 300)
        message = clip(make_visible(alert["message"]), 2500)
        link = f"<{_escape(alert['url'])}|Alert {alert['id']}>"
        return {
            "text": _escape(f"{title}: {message}"),
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": _escape(f"{title}\n{message}")}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": link}]},
            ],
        }


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
