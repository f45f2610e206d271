"""Retention: trimming attempt records in batches while the history stays whole."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, and_, delete, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute, sessionmaker

from monitor.core.states import DeliveryState
from monitor.store.models import Base, DeliveryAttempt, PollAttempt, WebhookDelivery

Progress = Callable[[str, int, int], None]
"""`progress(table, deleted_in_batch, deleted_so_far)`, called after each batch commits."""


def prune_poll_attempts(
    engine: Engine,
    *,
    older_than: datetime,
    batch_size: int = 5000,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Delete the attempt records from before `older_than`, `batch_size` rows per transaction.

    Trims `poll_attempts` (successes and failures) that started before the cutoff, and webhook
    deliveries that finished before it (`delivered` then, `expired` by then, or `failed` or
    `superseded` and made before it) together with their
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
    attempt_is_old = PollAttempt.started_at < older_than
    delivery_is_done = or_(
        and_(WebhookDelivery.state == DeliveryState.DELIVERED, WebhookDelivery.delivered_at < older_than),
        and_(WebhookDelivery.state == DeliveryState.EXPIRED, WebhookDelivery.expires_at < older_than),
        and_(
            WebhookDelivery.state.in_([DeliveryState.FAILED, DeliveryState.SUPERSEDED]),
            WebhookDelivery.created_at < older_than,
        ),
    )
    if dry_run:
        done_ids = select(WebhookDelivery.id).where(delivery_is_done)
        return {
            "poll_attempts": count_rows(engine, PollAttempt, attempt_is_old),
            "webhook_deliveries": count_rows(engine, WebhookDelivery, delivery_is_done),
            "delivery_attempts": count_rows(
                engine, DeliveryAttempt, DeliveryAttempt.delivery_id.in_(done_ids)
            ),
        }

    def attempts(connection: Connection, chosen: Sequence[ColumnElement[bool]]) -> dict[str, int]:
        return {"poll_attempts": connection.execute(delete(PollAttempt).where(*chosen)).rowcount}

    def deliveries(connection: Connection, chosen: Sequence[ColumnElement[bool]]) -> dict[str, int]:
        their_attempts = DeliveryAttempt.delivery_id.in_(select(WebhookDelivery.id).where(*chosen))
        return {
            "delivery_attempts": connection.execute(delete(DeliveryAttempt).where(their_attempts)).rowcount,
            "webhook_deliveries": connection.execute(delete(WebhookDelivery).where(*chosen)).rowcount,
        }

    totals = {"poll_attempts": 0, "webhook_deliveries": 0, "delivery_attempts": 0}
    totals |= delete_in_batches(
        engine, PollAttempt.id, attempt_is_old, attempts, batch_size=batch_size, progress=progress
    )
    totals |= delete_in_batches(
        engine, WebhookDelivery.id, delivery_is_done, deliveries, batch_size=batch_size, progress=progress
    )
    return totals


def delete_in_batches(
    engine: Engine,
    key: InstrumentedAttribute[Any],
    condition: ColumnElement[bool],
    delete_batch: Callable[[Connection, Sequence[ColumnElement[bool]]], dict[str, int]],
    *,
    batch_size: int,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Delete the rows matching `condition`, `batch_size` at a time, each batch in its own transaction.

    Batches walk the primary `key` upwards (keyset), so a run reads each row once, and an
    interrupted run has kept what it did. `delete_batch(connection, chosen)` deletes the rows the
    conditions `chosen` select (and what depends on them) and returns the rows deleted per table.
    Returns the totals per table.
    """
    sessions = sessionmaker(engine)
    totals: dict[str, int] = {}
    last: Any = None
    while True:
        with sessions.begin() as session:
            ids = select(key).where(condition)
            if last is not None:
                ids = ids.where(key > last)
            batch = ids.order_by(key).limit(batch_size).subquery()
            upper = session.scalar(select(func.max(batch.c[0])))
            if upper is None:
                return totals
            chosen = [condition, key <= upper] + ([key > last] if last is not None else [])
            deleted = delete_batch(session.connection(), chosen)
        last = upper
        for table, count in deleted.items():
            totals[table] = totals.get(table, 0) + count
            if progress is not None:
                progress(table, count, totals[table])


def count_rows(engine: Engine, table: type[Base], condition: ColumnElement[bool]) -> int:
    """How many rows of `table` match `condition` (what a dry run reports)."""
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(table).where(condition)) or 0)
