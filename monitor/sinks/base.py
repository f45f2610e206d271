"""What every alert sink is: its `[[webhooks]]` settings, the body it stores, the request it sends, the
events it hears.

A delivery's body is rendered once, when the alert event is queued, and stored in the outbox; each
attempt then turns the stored body into the request's bytes and headers. Secrets are read from the
environment when the sink is made and added only to what is sent: the outbox never holds one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from monitor.core.findings import Severity
from monitor.core.ijson import json_safe
from monitor.core.states import AlertEvent
from monitor.sinks.signing import key_from_env, sign

USER_AGENT = "drift-monitor-webhooks/1"


class WebhookConfig(BaseModel):
    """A `[[webhooks]]` entry: where to send which alerts, in which `format` (the sink's). A sink with
    settings of its own subclasses it in its module and names the subclass as its `settings`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    url: str
    """Where to POST; for "alertmanager" its `/api/v2/alerts`."""
    secret_env: str | None = None
    min_severity: Severity = Severity.HIGH
    format: str = "standard"
    """The sink (`monitor.sinks.SINKS`); the config checks it names one."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not re.match(r"^https?://", url):
            raise ValueError(f"must start with http:// or https:// (got {url!r})")
        return url


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def static_labels(labels: dict[str, str], reserved: frozenset[str]) -> dict[str, str]:
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


Settings = TypeVar("Settings", bound=WebhookConfig)


class Sink(Generic[Settings]):
    """A receiver of alert events. Subclasses set their `format` (and `settings`, when they have
    settings of their own) and override what differs. Every subclass in a module of this package is
    a sink: `monitor.sinks` finds it there."""

    format: ClassVar[str]
    settings: ClassVar[type[WebhookConfig]] = WebhookConfig
    """The config class this sink's `[[webhooks]]` entries are read as."""
    hears: ClassVar[frozenset[AlertEvent]] = frozenset({AlertEvent.OPENED, AlertEvent.RESOLVED})
    """The alert events queued for this sink."""
    reposts_open_alerts: ClassVar[bool] = False
    """Whether `serve` re-posts every open alert to it (`monitor.notify.repost`), for receivers that
    forget an alert they are not reminded of."""

    def __init__(self, webhook: Settings) -> None:
        if not isinstance(webhook, self.settings):
            raise TypeError(f"webhook {webhook.name}: format {self.format!r} takes {self.settings.__name__}")
        self.webhook = webhook
        self.signing_key = key_from_env(webhook.name, webhook.secret_env)

    @classmethod
    def body(cls, payload: Mapping[str, Any], webhook: Settings) -> Any:
        """The JSON this sink receives for one event (docs/contract.md section 9's body by default),
        with what the webhook's settings add (`webhook` is of the sink's `settings` class)."""
        return payload

    @classmethod
    def render(cls, payload: Mapping[str, Any], webhook: Settings) -> str:
        """The body text stored in the outbox.

        ASCII-only JSON: server text may hold lone surrogates that UTF-8 cannot encode, and escaping
        makes the signed bytes independent of any encoding step. Strict JSON: receivers' parsers
        reject a bare `NaN`, so a non-finite number (only in data stored before listings were
        checked) is sent as its name in a string.
        """
        return json.dumps(json_safe(cls.body(payload, webhook)), separators=(",", ":"), allow_nan=False)

    @classmethod
    def reposted_alerts(cls, stored: str) -> list[int]:
        """For a sink that `reposts_open_alerts`: the alert ids a stored re-post carries."""
        raise NotImplementedError(f"{cls.format} does not re-post open alerts")

    @classmethod
    def without(cls, stored: str, alert_ids: set[int]) -> str:
        """For a sink that `reposts_open_alerts`: the stored re-post without those alerts."""
        raise NotImplementedError(f"{cls.format} does not re-post open alerts")

    def content(self, stored: str) -> bytes:
        """The bytes sent for a stored body; raises `LookupError` when a secret it needs is not set."""
        return stored.encode("utf-8")

    def request(self, delivery_id: str, stored: str, timestamp: int) -> tuple[bytes, dict[str, str]]:
        """The body and headers of one attempt: Standard Webhooks' id and timestamp on every request,
        and its signature when a secret is configured."""
        content = self.content(stored)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": delivery_id,
            "webhook-timestamp": str(timestamp),
        }
        if self.signing_key is not None:
            headers["webhook-signature"] = sign(self.signing_key, delivery_id, timestamp, content)
        return content, headers


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut: receivers cap their fields."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
