"""Recording polls straight into a Store, for tests of what the store does with them."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from monitor.collect.poller import Poller
from monitor.core.fingerprint import CanonicalListing
from monitor.store import PollOutcome, Store, queries
from monitor.store.marks import from_epoch_ms
from monitor.store.models import PollAttempt, PollMark, Snapshot
from monitor.store.polled import PreparedDiff, SuccessfulPoll

HANDSHAKE: dict[str, Any] = {
    "pages": 1,
    "protocol_version": "2025-11-25",
    "server_info": None,
    "capabilities": {},
    "list_changed_advertised": False,
}
"""The handshake details every recorded poll of these tests and benchmarks shares."""


def record_poll(
    store: Store,
    server_id: int,
    tools: list[dict[str, Any]] | CanonicalListing,
    at: datetime,
    **handshake: Any,
) -> PollOutcome:
    """Record a successful poll that listed `tools`, started and finished at `at`.

    The handshake details (one page, protocol 2025-11-25, no server info or capabilities, no
    list-changed) are the same in every such test; `handshake` overrides any of them, and
    `started_at` the poll's start.
    """
    listing = tools if isinstance(tools, CanonicalListing) else CanonicalListing.of(tools)
    details: dict[str, Any] = {"started_at": at, **HANDSHAKE, "finished_at": at, **handshake}
    return store.record(SuccessfulPoll(server_id, listing, **details))


def stored_tools(store: Store, server: str, at: datetime) -> list[dict[str, Any]]:
    """The tools of the version of `server` in force at `at`, as the server sent them (`_meta` too)."""
    with store.sessions() as session:
        in_force = queries.snapshot_at(session, server, at)
        assert in_force is not None, f"{server} had no version at {at}"
        return queries.listing_tools(session, in_force.snapshot.listing_id, in_force.snapshot.id)


def version_digests(store: Store, server_id: int) -> list[bytes | None]:
    """The digests of the server's versions (`Snapshot.listing_digest`), oldest first."""
    with store.sessions() as session:
        statement = (
            select(Snapshot.listing_digest).where(Snapshot.server_id == server_id).order_by(Snapshot.version)
        )
        return list(session.scalars(statement))


def fetched_poll(server_id: int, listing: CanonicalListing, at: datetime, **handshake: Any) -> SuccessfulPoll:
    """A 40 ms poll of `listing` started at `at`, as the poller hands it to the writer (for group
    commit: `monitor.store.batch.record_unchanged`); `handshake` overrides any detail."""
    details: dict[str, Any] = {**HANDSHAKE, **handshake}
    return SuccessfulPoll(
        server_id, listing, started_at=at, finished_at=at + timedelta(milliseconds=40), **details
    )


def poll_history(session: Session) -> list[tuple[datetime, bool, str | None]]:
    """Every recorded poll, oldest first, as (started_at, ok, error_kind): full attempt rows and the
    compact marks unchanged polls leave, read back as one history."""
    attempts = session.execute(select(PollAttempt.started_at, PollAttempt.ok, PollAttempt.error_kind)).all()
    marks = session.scalars(select(PollMark.started_ms)).all()
    rows = [(at, ok, kind) for at, ok, kind in attempts] + [(from_epoch_ms(ms), True, None) for ms in marks]
    return sorted(rows, key=lambda row: row[0])


class DiffReadsSeen(Store):
    """A Store that notes every server whose pre-diff read (`prepare_diff`) a poller asked for: the
    read a poll of a listing its poller has seen before skips."""

    def __init__(self, engine: Engine, **options: Any) -> None:
        super().__init__(engine, **options)
        self.diff_reads: list[int] = []

    def prepare_diff(self, server_id: int, listing: CanonicalListing) -> PreparedDiff | None:
        self.diff_reads.append(server_id)
        return super().prepare_diff(server_id, listing)


def poll_once(poller: Poller) -> PollOutcome:
    """Poll the poller's one configured server once, as `drift-monitor poll` does, and close it."""

    async def run() -> PollOutcome:
        (outcome,) = await poller.poll(poller.jobs())
        return outcome

    try:
        return asyncio.run(run())
    finally:
        poller.close()
