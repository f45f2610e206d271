"""`[[webhooks]]` entries: the alert sinks' settings. What each format sends is its sink module's
(`monitor.notify.sinks`); a format with settings of its own has its class in `WEBHOOK_SETTINGS`."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.core.rules import Severity

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


class WebhookConfig(BaseModel):
    """A `[[webhooks]]` entry: an alert sink. What each format sends is its sink module's
    (`monitor.notify.sinks`); a format with settings of its own has its class in `WEBHOOK_SETTINGS`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    url: str
    """Where to POST; for "alertmanager" its `/api/v2/alerts`."""
    secret_env: str | None = None
    min_severity: Severity = Severity.HIGH
    format: Literal["standard", "slack", "alertmanager", "pagerduty"] = "standard"

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.match(r"^https?://", url):
            raise ValueError(f"must start with http:// or https:// (got {url!r})")
        return url


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _static_labels(labels: dict[str, str], reserved: frozenset[str]) -> dict[str, str]:
    """`labels = {env = "prod"}`: names a Prometheus label may have, none the sink sets itself, and
    non-empty values (Alertmanager reads an empty label as an absent one)."""
    for name, value in labels.items():
        if not _LABEL_NAME.match(name) or name.startswith("__"):
            raise ValueError(f"{name!r}: use letters, digits and '_', not starting with a digit or '__'")
        if name in reserved:
            raise ValueError(f"{name!r}: set by drift-monitor itself ({', '.join(sorted(reserved))})")
        if not value:
            raise ValueError(f"{name!r}: the value must not be empty")
    return labels


class AlertmanagerWebhookConfig(WebhookConfig):
    """Alertmanager's API v2, with static labels added to every alert (two environments told apart)."""

    format: Literal["standard", "slack", "alertmanager", "pagerduty"] = "alertmanager"
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return _static_labels(labels, frozenset({"alertname", "severity", "server", "tool", "session_id"}))


class PagerDutyWebhookConfig(WebhookConfig):
    """PagerDuty's Events API v2: the integration's routing key comes from a variable, added to each
    event as it is sent (never stored in the outbox); static labels go into `custom_details`."""

    format: Literal["standard", "slack", "alertmanager", "pagerduty"] = "pagerduty"
    url: str = PAGERDUTY_EVENTS_URL
    routing_key_env: str = Field(min_length=1)
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        return _static_labels(labels, frozenset({"alert", "findings"}))


WEBHOOK_SETTINGS: dict[str, type[WebhookConfig]] = {
    "alertmanager": AlertmanagerWebhookConfig,
    "pagerduty": PagerDutyWebhookConfig,
}
"""The settings class of each format that has settings beyond `WebhookConfig`'s."""
