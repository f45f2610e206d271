"""Migration 0016 (a listing's digest kept with its version) on a database the 0015 release filled:
versions without a digest until a poll gives them one, the servers with an open `listing-flapping`
alert marked, and every row kept down to 0015 and up again."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, inspect, select
from support import record_poll, versioned_listing
from support.polls import fetched_poll, version_digests
from support.releases import OlderRows

from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store, current_revision, downgrade, migrate
from monitor.store.batch import record_unchanged
from monitor.store.digests import current_digests
from monitor.store.models import Alert, PollAttempt, Server, Snapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_upgrade_from_a_database_the_previous_release_filled(fresh_engine: Engine) -> None:
    """A database at 0015 with a server and its version upgrades to 0016: the version has no digest
    (nothing is recalled for it) until a poll of its listing gives it one; only the server with an
    open `listing-flapping` alert is marked as possibly having one; down and up again keeps every
    row."""
    migrate(fresh_engine, "0015")
    listing = CanonicalListing.of(versioned_listing())
    server_id = fill_as_0015(fresh_engine, listing)
    migrate(fresh_engine)
    store = Store(fresh_engine)
    with store.sessions() as session:
        marked = dict(session.execute(select(Server.name, Server.flapping_alert_possible)).all())
    assert marked == {"old": False, "flapping": True, "settled": False}
    assert version_digests(store, server_id) == [None] and current_digests(store.sessions) == {}
    text = hashlib.sha256(b"listing text").digest()
    (outcome,) = record_unchanged(store, [replace(fetched_poll(server_id, listing, T0), digest=text)])
    assert outcome is not None and outcome.version == 1
    assert current_digests(store.sessions) == {server_id: (text, listing.fingerprint)}
    downgrade(fresh_engine, "0015")
    assert current_revision(fresh_engine) == "0015"
    with fresh_engine.connect() as connection:
        columns = {column["name"] for column in inspect(connection).get_columns("snapshots")}
    assert "listing_digest" not in columns and "poll_count" in columns
    with fresh_engine.connect() as connection:
        columns = {column["name"] for column in inspect(connection).get_columns("servers")}
    assert "flapping_alert_possible" not in columns and "polls_marked" in columns
    migrate(fresh_engine)
    assert version_digests(store, server_id) == [None]
    with store.sessions() as session:  # no table was copied: nothing cascaded from a dropped one
        assert session.scalars(select(PollAttempt.snapshot_id)).all() == [1]
        assert len(session.scalars(select(Alert.id)).all()) == 2
    record_poll(store, server_id, listing, T0 + timedelta(minutes=2))
    with store.sessions() as session:
        assert session.scalar(select(Snapshot.poll_count)) == 3


def fill_as_0015(engine: Engine, listing: CanonicalListing) -> int:
    """What the 0015 release wrote for a server polled once: the server, its listing (tools too) and
    its version, through the tables as that database has them; and two servers with a
    `listing-flapping` alert, open and resolved. Returns the first server's id."""
    with engine.begin() as connection:
        names = ("servers", "listings", "tool_definitions", "listing_tools", "snapshots", "poll_attempts")
        rows = OlderRows(connection, *names, "alerts")
        server_id = rows.server("old", T0)
        snapshot_id = rows.version(server_id, listing, T0)
        for name, key in (("flapping", "open key"), ("settled", None)):
            rows.insert(
                "alerts",
                server_id=rows.server(name, T0),
                rule="listing-flapping",
                severity="high",
                severity_rank=3,
                state="resolved" if key is None else "open",
                open_key=key,
                message="went back to an earlier listing",
                opened_at=T0,
                last_seen_at=T0,
            )
        rows.insert(
            "poll_attempts",
            server_id=server_id,
            started_at=T0,
            duration_ms=12.5,
            ok=True,
            snapshot_id=snapshot_id,
            pages=1,
        )
    return server_id
