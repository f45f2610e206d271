"""What every alert sink is: the body it stores, the request it sends, the events it hears.

A delivery's body is rendered once, when the alert event is queued, and stored in the outbox; each
attempt then turns the stored body into the request's bytes and headers. Secrets are read from the
environment when the sink is made and added only to what is sent: the outbox never holds one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from monitor.config.webhooks import WebhookConfig
from monitor.core.ijson import json_safe
from monitor.core.states import AlertEvent
from monitor.notify.signing import key_from_env, sign

USER_AGENT = "drift-monitor-webhooks/1"


class Sink:
    """A receiver of alert events. Subclasses set their `format` and override what differs."""

    format: ClassVar[str]
    settings: ClassVar[type[WebhookConfig]] = WebhookConfig
    """The config class this sink's `[[webhooks]]` entries are read as."""
    hears: ClassVar[frozenset[AlertEvent]] = frozenset({AlertEvent.OPENED, AlertEvent.RESOLVED})
    """The alert events queued for this sink."""
    reposts_open_alerts: ClassVar[bool] = False
    """Whether `serve` re-posts every open alert to it (`monitor.notify.repost`), for receivers that
    forget an alert they are not reminded of."""

    def __init__(self, webhook: WebhookConfig) -> None:
        if not isinstance(webhook, self.settings):
            raise TypeError(f"webhook {webhook.name}: format {self.format!r} takes {self.settings.__name__}")
        self.webhook = webhook
        self.signing_key = key_from_env(webhook)

    @classmethod
    def body(cls, payload: Mapping[str, Any], webhook: WebhookConfig) -> Any:
        """The JSON this sink receives for one event (docs/contract.md section 9's body by default),
        with what the webhook's settings add (`webhook` is of the sink's `settings` class)."""
        return payload

    @classmethod
    def render(cls, payload: Mapping[str, Any], webhook: WebhookConfig) -> str:
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
