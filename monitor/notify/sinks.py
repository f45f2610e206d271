"""Alert sinks that are products, not webhooks: Alertmanager's API v2 and PagerDuty's Events API v2.

Both are rendered from the SPEC section 9 alert body (`monitor.notify.payloads.alert_payload`) and
go through the same outbox, retries and attempt records as every webhook.

- Alertmanager (`POST /api/v2/alerts`) takes a list of postable alerts. Labels identify an alert
  (`alertname` = rule id, `severity`, `server`, `tool`), so re-posting an open one only keeps it
  firing; resolving sends it once more with `endsAt`. Open alerts are re-posted every minute
  (`monitor.notify.repost`), as Prometheus does, so an Alertmanager restart forgets nothing for long.
- PagerDuty takes one event: `trigger`, `acknowledge` or `resolve`, tied together by `dedup_key`
  (the alert id). The routing key is a secret, so the stored body leaves it out and
  `with_routing_key` adds it as the event is sent.
"""

from __future__ import annotations

import json
from typing import Any

ALERT_ACKNOWLEDGED = "alert.acknowledged"
"""Only PagerDuty hears of acknowledgements (SPEC 9 webhooks carry opened and resolved)."""
ALERTS_FIRING = "alerts.firing"
"""The periodic re-post of every open alert to an Alertmanager."""

PAGERDUTY_SEVERITY = {
    "critical": "critical",
    "high": "error",
    "medium": "warning",
    "low": "info",
    "info": "info",
}
_PAGERDUTY_ACTION = {
    "alert.opened": "trigger",
    ALERT_ACKNOWLEDGED: "acknowledge",
    "alert.resolved": "resolve",
}
_SUMMARY_LIMIT = 1024
"""PagerDuty's limit on `payload.summary`."""


def alertmanager_alerts(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Postable alerts for one alert event, or for every alert of an `alerts.firing` re-post."""
    events = payload["alerts"] if payload["type"] == ALERTS_FIRING else [payload]
    return [_postable(event) for event in events]


def _postable(event: dict[str, Any]) -> dict[str, Any]:
    alert = event["alert"]
    labels = {"alertname": alert["rule"], "severity": alert["severity"], "server": alert["server"]}
    if alert["tool"]:  # Alertmanager reads an empty label as an absent one; leave it out
        labels["tool"] = alert["tool"]
    if alert.get("session_id"):
        labels["session_id"] = alert["session_id"]
    postable: dict[str, Any] = {
        "labels": labels,
        "annotations": {"summary": _clip(alert["message"], _SUMMARY_LIMIT), "alert_id": str(alert["id"])},
        "startsAt": alert["opened_at"],
        "generatorURL": alert["url"],
    }
    if event["type"] == "alert.resolved" and alert.get("resolved_at"):
        postable["endsAt"] = alert["resolved_at"]
    return postable


def pagerduty_event(payload: dict[str, Any]) -> dict[str, Any]:
    """An Events API v2 event without its `routing_key`: trigger, acknowledge or resolve."""
    alert = payload["alert"]
    event: dict[str, Any] = {
        "event_action": _PAGERDUTY_ACTION[payload["type"]],
        "dedup_key": str(alert["id"]),  # SPEC 11: the alert id
    }
    if event["event_action"] != "trigger":
        return event
    subject = alert["server"] + (f" / {alert['tool']}" if alert["tool"] else "")
    event["payload"] = {
        "summary": _clip(f"[{alert['rule']}] {subject}: {alert['message']}", _SUMMARY_LIMIT),
        "source": alert["server"],
        "severity": PAGERDUTY_SEVERITY[alert["severity"]],
        "timestamp": alert["opened_at"],
        "component": alert["tool"] or alert["server"],
        "group": alert["server"],
        "class": alert["rule"],
        "custom_details": {"alert": alert, "findings": payload.get("findings", [])},
    }
    event["client"] = "drift-monitor"
    event["client_url"] = alert["url"]
    event["links"] = [{"href": alert["url"], "text": f"drift-monitor alert {alert['id']}"}]
    return event


def with_routing_key(body: str, routing_key: str) -> bytes:
    """The stored PagerDuty event with its routing key, as sent (ASCII JSON, like every body)."""
    return json.dumps({"routing_key": routing_key, **json.loads(body)}, separators=(",", ":")).encode()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
