"""Migration 0015 (compact attempt rows) on a database the previous release (schema 0003) filled:
every row kept, and unchanged polls recorded as compact marks from then on, read back with the old
full rows as one history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, select
from support import record_poll, versioned_listing
from support.releases import OlderRows

from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store, current_revision, migrate
from monitor.store.models import PollAttempt, PollMark, Server, Snapshot
from monitor.store.queries.servers import recent_attempts

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TABLES_0003 = ("servers", "listings", "tool_definitions", "listing_tools", "snapshots", "poll_attempts")


def test_upgrade_from_a_database_the_previous_release_filled(fresh_engine: Engine) -> None:
    """A database at 0003 with servers, versions and attempts upgrades to head, keeps every row, and
    records compact marks for unchanged polls from then on."""
    migrate(fresh_engine, "0003")
    assert current_revision(fresh_engine) == "0003"
    fill_like_the_previous_release(fresh_engine)
    migrate(fresh_engine)
    store = Store(fresh_engine, attempts_kept=5)
    server_id = store.server_id("old")
    assert server_id is not None
    record_poll(store, server_id, versioned_listing(), T0 + timedelta(minutes=1))
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Server)) == 1
        assert session.scalar(select(Snapshot.poll_count)) == 2
        assert session.scalar(select(func.count()).select_from(PollAttempt)) == 2
        assert session.scalar(select(func.count()).select_from(PollMark)) == 1
        recent = recent_attempts(session, server_id)
    assert [a.started_at for a in recent] == [
        T0 + timedelta(minutes=1),
        T0 + timedelta(seconds=30),
        T0,
    ], "old full rows and new marks read back as one history"


def fill_like_the_previous_release(engine: Engine) -> None:
    """What 0003's code wrote for a server polled twice: a version, its listing and tools, two full
    attempt rows (written through the tables as the database has them, not through today's models)."""
    with engine.begin() as connection:
        rows = OlderRows(connection, *TABLES_0003)
        server_id = rows.server("old", T0)
        snapshot_id = rows.version(server_id, CanonicalListing.of(versioned_listing()), T0)
        for seconds in (0, 30):
            at = T0 + timedelta(seconds=seconds)
            rows.insert(
                "poll_attempts",
                server_id=server_id,
                started_at=at,
                duration_ms=12.5,
                ok=True,
                snapshot_id=snapshot_id,
                pages=1,
            )
