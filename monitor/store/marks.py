"""Compact rows for unchanged polls (`poll_marks`): writing the ring, reading it back as attempts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from monitor.store.models import PollMark

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(at: datetime) -> int:
    """Milliseconds since the Unix epoch: what a mark stores instead of a timestamp column."""
    return (at - EPOCH) // timedelta(milliseconds=1)


def from_epoch_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def mark(
    server_id: int, marked: int, kept: int, started_at: datetime, finished_at: datetime
) -> dict[str, Any]:
    """The ring row of the server's `marked`-th unchanged poll: once `kept` are stored, each new one
    overwrites the oldest."""
    return {
        "server_id": server_id,
        "slot": marked % max(kept, 1),
        "started_ms": epoch_ms(started_at),
        "duration_ms": max(0, round((finished_at - started_at).total_seconds() * 1000)),
    }


def write_marks(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Upsert marks in the caller's transaction: one statement, executed for every row."""
    if not rows:
        return
    session.connection().execute(_upsert(session.get_bind().dialect.name), list(rows))


@cache
def _upsert(dialect: str) -> Any:
    """The dialect's upsert of a mark, built once (building it cost more than running it), run as Core:
    no ORM bulk-insert bookkeeping for rows nothing reads back."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(PollMark)
    return statement.on_conflict_do_update(
        index_elements=["server_id", "slot"],
        set_={"started_ms": statement.excluded.started_ms, "duration_ms": statement.excluded.duration_ms},
    )
