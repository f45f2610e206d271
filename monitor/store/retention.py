"""Retention: trimming attempt records in batches while the history stays whole."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine, and_, delete, func, or_, select
from sqlalchemy.orm import sessionmaker

from monitor.core.states import DeliveryState
from monitor.store.models import DeliveryAttempt, PollAttempt, WebhookDelivery


def prune_poll_attempts(
    engine: Engine,
    *,
    older_than: datetime,
    batch_size: int = 5000,
    dry_run: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, int]:
    """Delete the attempt records from before `older_than`, `batch_size` rows per transaction.

    Trims `poll_attempts` (successes and failures) that started before the cutoff, and webhook
    deliveries that finished before it (`delivered` then, or `expired` by then) together with their
    `delivery_attempts`. Pending deliveries are never touched, nor are servers, snapshots, findings,
    listings, tool definitions, alerts or host sessions: the history stays whole. The compact
    marks of unchanged polls (`poll_marks`) are a ring of `attempts_kept` per server, rewritten in
    place, so they never need pruning and are left alone.

    Each batch commits on its own, so the monitor keeps running alongside, and an interrupted prune
    has kept what it did. Batches walk the primary key upwards (keyset), so the whole run reads
    each row once. `progress(table, deleted_in_batch, deleted_so_far)` follows every commit.
    Returns the rows deleted per table; with `dry_run`, the rows that would be, changing nothing.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if older_than.tzinfo is None:
        raise ValueError("older_than must be an aware datetime")
    sessions = sessionmaker(engine)
    attempt_is_old = PollAttempt.started_at < older_than
    delivery_is_done = or_(
        and_(WebhookDelivery.state == DeliveryState.DELIVERED, WebhookDelivery.delivered_at < older_than),
        and_(WebhookDelivery.state == DeliveryState.EXPIRED, WebhookDelivery.expires_at < older_than),
    )
    totals = {"poll_attempts": 0, "webhook_deliveries": 0, "delivery_attempts": 0}

    if dry_run:
        with sessions() as session:
            done_ids = select(WebhookDelivery.id).where(delivery_is_done)
            totals["poll_attempts"] = (
                session.scalar(select(func.count()).select_from(PollAttempt).where(attempt_is_old)) or 0
            )
            totals["webhook_deliveries"] = (
                session.scalar(select(func.count()).select_from(WebhookDelivery).where(delivery_is_done)) or 0
            )
            totals["delivery_attempts"] = (
                session.scalar(
                    select(func.count())
                    .select_from(DeliveryAttempt)
                    .where(DeliveryAttempt.delivery_id.in_(done_ids))
                )
                or 0
            )
        return totals

    def report(table: str, count: int) -> None:
        totals[table] += count
        if progress is not None:
            progress(table, count, totals[table])

    last_attempt: int | None = None
    while True:
        with sessions.begin() as session:
            attempt_ids = select(PollAttempt.id).where(attempt_is_old)
            if last_attempt is not None:
                attempt_ids = attempt_ids.where(PollAttempt.id > last_attempt)
            attempt_batch = attempt_ids.order_by(PollAttempt.id).limit(batch_size).subquery()
            upper = session.scalar(select(func.max(attempt_batch.c.id)))
            if upper is None:
                break
            in_batch = [attempt_is_old, PollAttempt.id <= upper]
            if last_attempt is not None:
                in_batch.append(PollAttempt.id > last_attempt)
            deleted = session.connection().execute(delete(PollAttempt).where(*in_batch)).rowcount
        last_attempt = upper
        report("poll_attempts", deleted)

    last_delivery: str | None = None
    while True:
        with sessions.begin() as session:
            delivery_ids = select(WebhookDelivery.id).where(delivery_is_done)
            if last_delivery is not None:
                delivery_ids = delivery_ids.where(WebhookDelivery.id > last_delivery)
            delivery_batch = delivery_ids.order_by(WebhookDelivery.id).limit(batch_size).subquery()
            upper_id = session.scalar(select(func.max(delivery_batch.c.id)))
            if upper_id is None:
                break
            chosen = [delivery_is_done, WebhookDelivery.id <= upper_id]
            if last_delivery is not None:
                chosen.append(WebhookDelivery.id > last_delivery)
            connection = session.connection()
            attempts = connection.execute(
                delete(DeliveryAttempt).where(
                    DeliveryAttempt.delivery_id.in_(select(WebhookDelivery.id).where(*chosen))
                )
            ).rowcount
            deliveries = connection.execute(delete(WebhookDelivery).where(*chosen)).rowcount
        last_delivery = upper_id
        report("delivery_attempts", attempts)
        report("webhook_deliveries", deliveries)
    return totals
