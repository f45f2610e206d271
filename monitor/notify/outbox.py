"""The outbox: a delivery is a row, committed with the alert that caused it, before anything is sent.

A crash or restart therefore loses none. Its id is the `webhook-id` of every attempt, so a
receiver that saw a body but whose answer was lost can drop the repeat. Failed attempts are
retried with exponential backoff and full jitter until the delivery expires.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from monitor.core.states import AlertEvent, DeliveryState
from monitor.sinks import render
from monitor.sinks.base import WebhookConfig
from monitor.store.models import WebhookDelivery

DEFAULT_EXPIRY = timedelta(hours=24)
_WAKES = "drift_monitor.webhook_wakes"


def opened_for(session: Session, alert_id: int) -> set[str]:
    """The webhooks an `alert.opened` of this alert was queued for (whatever became of it)."""
    query = select(WebhookDelivery.webhook).where(
        WebhookDelivery.alert_id == alert_id, WebhookDelivery.event_type == AlertEvent.OPENED
    )
    return set(session.scalars(query))


def enqueue(
    session: Session,
    webhook: WebhookConfig,
    payload: dict[str, Any],
    *,
    alert_id: int | None,
    now: datetime,
    expires_after: timedelta = DEFAULT_EXPIRY,
) -> WebhookDelivery:
    """Add a pending delivery to the caller's transaction, so it commits with what caused it."""
    delivery = WebhookDelivery(
        id=f"msg_{secrets.token_hex(16)}",
        webhook=webhook.name,
        alert_id=alert_id,
        event_type=payload["type"],
        body=render(webhook, payload),
        state=DeliveryState.PENDING,
        created_at=now,
        next_attempt_at=now,
        expires_at=now + expires_after,
        attempts=0,
    )
    session.add(delivery)
    return delivery


def wake_after_commit(session: Session, wake: Callable[[], None]) -> None:
    """Call `wake` once the transaction commits: woken earlier, a deliverer would find nothing yet."""
    session.info.setdefault(_WAKES, set()).add(wake)
    if not event.contains(session, "after_commit", _fire_wakes):
        event.listen(session, "after_commit", _fire_wakes)


def _fire_wakes(session: Session) -> None:
    for wake in session.info.pop(_WAKES, set()):
        wake()


def backoff_delay(attempts: int, retry_after: float | None, *, base: float, cap: float) -> float:
    """Exponential backoff with full jitter, so retries to one dead receiver do not arrive in waves.

    A receiver's Retry-After is a floor, honoured up to the cap.
    """
    delay = random.uniform(0.0, min(cap, base * 2.0 ** min(attempts - 1, 60)))  # noqa: S311 - jitter
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or garbled."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())
