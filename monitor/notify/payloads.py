"""What a webhook receives: the SPEC section 9 alert body, and its rendering per webhook format."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from monitor.config import WebhookConfig
from monitor.core.ijson import json_safe
from monitor.core.text import make_visible
from monitor.notify.sinks import alertmanager_alerts, pagerduty_event
from monitor.store.models import Alert, FindingRecord
from monitor.store.records import AlertRecord, FindingFields

ALERT_OPENED = "alert.opened"
ALERT_RESOLVED = "alert.resolved"
MAX_FINDINGS = 100
"""Findings carried in one payload; a long-lived alert can gather many, the dashboard has them all."""


def alert_payload(
    event_type: str, alert: Alert, server: str, findings: Sequence[FindingRecord], base_url: str
) -> dict[str, Any]:
    """The SPEC 9 body, built from the alert's and its findings' records; `state`, `session_id` and
    `resolved_at` are extras for receivers that route."""
    record = AlertRecord.of(alert, server=server, finding_count=len(findings))
    return {
        "type": event_type,
        "alert": {
            "id": record.id,
            "rule": record.rule,
            "severity": record.severity.value,
            "state": record.state.value,
            "server": record.server,
            "tool": record.tool,
            "session_id": record.session_id,
            "message": record.message,
            "opened_at": _iso(record.opened_at),
            "resolved_at": _iso(record.resolved_at) if record.resolved_at else None,
            "url": f"{base_url.rstrip('/')}/alerts/{record.id}",
        },
        "findings": [_finding_payload(finding) for finding in findings[:MAX_FINDINGS]],
    }


def _finding_payload(stored: FindingRecord) -> dict[str, Any]:
    finding = FindingFields.model_validate(stored)
    return {
        "rule": finding.rule,
        "severity": finding.severity.value,
        "tool": finding.tool,
        "field": finding.field,
        "old": finding.old,
        "new": finding.new,
        "message": finding.message,
        "detected_at": _iso(stored.detected_at),
    }


def render(webhook: WebhookConfig, payload: dict[str, Any]) -> str:
    """The exact body text for one webhook.

    ASCII-only JSON: server text may hold lone surrogates that UTF-8 cannot encode, and escaping
    makes the signed bytes independent of any encoding step. Strict JSON: receivers' parsers reject
    a bare `NaN`, so a non-finite number (only in data stored before listings were checked) is sent
    as its name in a string.
    """
    body: Any = payload
    if webhook.format == "slack":
        body = slack_message(payload)
    elif webhook.format == "alertmanager":
        body = alertmanager_alerts(payload)
    elif webhook.format == "pagerduty":
        body = pagerduty_event(payload)
    return json.dumps(json_safe(body), separators=(",", ":"), allow_nan=False)


def slack_message(payload: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook body. Server-controlled text is escaped so it cannot mention or link."""
    alert = payload["alert"]
    verb = "resolved" if payload["type"] == ALERT_RESOLVED else "opened"
    subject = alert["server"] + (f" / {alert['tool']}" if alert["tool"] else "")
    title = _clip(f"[{alert['severity'].upper()}] {alert['rule']} {verb} on {make_visible(subject)}", 300)
    message = _clip(make_visible(alert["message"]), 2500)
    link = f"<{_slack_escape(alert['url'])}|Alert {alert['id']}>"
    return {
        "text": _slack_escape(f"{title}: {message}"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": _slack_escape(f"{title}\n{message}")}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": link}]},
        ],
    }


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
