"""Alertmanager's API v2 (`POST /api/v2/alerts`): postable alerts, re-posted while open.

Labels identify an alert (`alertname` = rule id, `severity`, `server`, `tool`), so re-posting an open
one only keeps it firing; resolving sends it once more with `endsAt`. Alertmanager forgets an alert
it has not heard of for `resolve_timeout` and keeps nothing across a restart without persistence,
so open alerts are re-posted every minute (`monitor.notify.repost`), as Prometheus does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from monitor.core.states import AlertEvent
from monitor.sinks.base import Sink, WebhookConfig, clip, static_labels

SUMMARY_LIMIT = 1024


class AlertmanagerWebhookConfig(WebhookConfig):
    """Alertmanager's API v2, with static labels added to every alert (two environments told apart)."""

    format: Literal["alertmanager"] = "alertmanager"
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return static_labels(labels, frozenset({"alertname", "severity", "server", "tool", "session_id"}))


class Alertmanager(Sink[AlertmanagerWebhookConfig]):
    format = "alertmanager"
    settings = AlertmanagerWebhookConfig
    reposts_open_alerts = True

    @classmethod
    def body(cls, payload: Mapping[str, Any], webhook: AlertmanagerWebhookConfig) -> list[dict[str, Any]]:
        """Postable alerts for one alert event, or for every alert of an `alerts.firing` re-post, each
        with the webhook's static labels."""
        events = payload["alerts"] if payload["type"] == AlertEvent.FIRING else [payload]
        return [_postable(event, webhook.labels) for event in events]

    @classmethod
    def reposted_alerts(cls, stored: str) -> list[int]:
        """The alert ids a stored re-post carries (its `alert_id` annotations)."""
        return [int(item["annotations"]["alert_id"]) for item in json.loads(stored)]

    @classmethod
    def without(cls, stored: str, alert_ids: set[int]) -> str:
        """The stored re-post without the alerts of `alert_ids`."""
        kept = [item for item in json.loads(stored) if int(item["annotations"]["alert_id"]) not in alert_ids]
        return json.dumps(kept, separators=(",", ":"))


def _postable(event: Mapping[str, Any], static: Mapping[str, str]) -> dict[str, Any]:
    alert = event["alert"]
    labels = {**static, "alertname": alert["rule"], "severity": alert["severity"], "server": alert["server"]}
    if alert["tool"]:  # Alertmanager reads an empty label as an absent one; leave it out
        labels["tool"] = alert["tool"]
    if alert.get("session_id"):
        labels["session_id"] = alert["session_id"]
    postable: dict[str, Any] = {
        "labels": labels,
        "annotations": {"summary": clip(alert["message"], SUMMARY_LIMIT), "alert_id": str(alert["id"])},
        "startsAt": alert["opened_at"],
        "generatorURL": alert["url"],
    }
    if event["type"] == AlertEvent.RESOLVED and alert.get("resolved_at"):
        postable["endsAt"] = alert["resolved_at"]
    return postable
