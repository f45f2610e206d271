"""A listing's digest kept with its version: a restarted instance (or another one sharing the
database) does not index again, or diff before recording, a listing whose text a version holds."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, select
from support import WAIT, http_server, record_poll, versioned_listing, wait_until
from support.polls import DiffReadsSeen, fetched_poll
from support.releases import OlderRows

from monitor.collect.poller import Poller
from monitor.collect.scheduler import Scheduler
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store, current_revision, downgrade, make_engine, migrate
from monitor.store.batch import record_unchanged
from monitor.store.digests import current_digests
from monitor.store.models import Alert, FindingRecord, PollAttempt, Server, Snapshot
from monitor.store.registration import sync_servers

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "sekrit-token-4242"


def write_tools(path: Path, listed: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps(listed))
    return str(path)


def digests(store: Store, server_id: int) -> list[bytes | None]:
    """The server's versions' digests, oldest first."""
    with store.sessions() as session:
        return list(
            session.scalars(
                select(Snapshot.listing_digest)
                .where(Snapshot.server_id == server_id)
                .order_by(Snapshot.version)
            )
        )


def config_of(*servers: ServerConfig, interval: float = 60) -> Config:
    return Config(
        monitor=MonitorSettings(poll_timeout=WAIT, poll_interval=interval),
        servers=list(servers),
        source="test",
    )


def test_a_version_keeps_its_digest_and_the_current_one_is_recalled(store: Store) -> None:
    """A new version keeps its poll's digest; a poll without one (secrets redacted) stores none,
    and a later poll of the same listing gives the version its digest. Only a server's current
    version counts: a newer version without a digest hides an older one's."""
    ids = sync_servers(
        store, [ServerConfig(name=n, transport="http", url="http://127.0.0.1:9/") for n in "abc"], T0
    )
    a, b, c = ids["a"], ids["b"], ids["c"]
    listing, changed = (
        CanonicalListing.of(versioned_listing()),
        CanonicalListing.of(versioned_listing(version=2)),
    )
    text, other = hashlib.sha256(b"one").digest(), hashlib.sha256(b"two").digest()
    store.record(replace(fetched_poll(a, listing, T0), digest=text))
    store.record(fetched_poll(b, listing, T0))
    store.record(replace(fetched_poll(c, listing, T0), digest=text))
    assert digests(store, a) == [text] and digests(store, b) == [None]
    assert current_digests(store.sessions) == {a: (text, listing.fingerprint), c: (text, listing.fingerprint)}

    at = T0 + timedelta(minutes=1)
    polls = [replace(fetched_poll(sid, listing, at), digest=other) for sid in (a, b)]
    assert all(record_unchanged(store, polls))
    store.record(fetched_poll(c, changed, at))
    assert digests(store, a) == [text], "a version keeps the first text it was seen as"
    assert digests(store, b) == [other], "a version stored without a digest takes the next poll's"
    assert digests(store, c) == [text, None]
    assert current_digests(store.sessions, [a, c]) == {a: (text, listing.fingerprint)}


async def test_a_polled_version_keeps_the_digest_of_its_text_unless_secrets_were_redacted(
    store: Store, tmp_path: Path
) -> None:
    """Two servers answering the same listing, which holds one of them's header value: that one's
    listing is redacted (so not the text the server sent) and its version keeps no digest."""
    listed = versioned_listing()
    listed[1]["description"] = f"Delete. Token {SECRET}."
    with http_server("fastmcp_server.py", write_tools(tmp_path / "tools.json", listed)) as url:
        plain = ServerConfig(name="plain", transport="http", url=url)
        guarded = ServerConfig(name="guarded", transport="http", url=url, headers={"X-Key": SECRET})
        poller = Poller(store, config_of(plain, guarded))
        try:
            jobs = poller.jobs()
            outcomes = await poller.poll(jobs)
        finally:
            poller.close()
    assert all(o.ok and o.new_version for o in outcomes), outcomes
    kept, redacted = (digests(store, job.server_id) for job in jobs)
    assert redacted == [None]
    assert kept == [poller.indexed[jobs[0].server_id][0]] and len(kept[0] or b"") == 32
    assert jobs[1].server_id not in poller.indexed


async def test_a_restarted_scheduler_does_not_index_an_unchanged_listing_again(
    engine: Engine, tmp_path: Path
) -> None:
    """Two servers polled, then the instance stops; one server's tool stops being read-only while
    it is down. The restarted instance's first polls: the unchanged server's is neither diffed
    before recording nor a new version; the changed one's is a new version with its findings."""
    same_file, moved_file = tmp_path / "same.json", tmp_path / "moved.json"
    write_tools(same_file, versioned_listing())
    write_tools(moved_file, versioned_listing())
    with (
        http_server("fastmcp_server.py", str(same_file)) as same_url,
        http_server("fastmcp_server.py", str(moved_file)) as moved_url,
    ):
        servers = (
            ServerConfig(name="same", transport="http", url=same_url),
            ServerConfig(name="moved", transport="http", url=moved_url),
        )
        config = config_of(*servers, interval=3600)
        first = Poller(Store(engine), config)
        try:
            jobs = first.jobs()
            assert all(o.new_version for o in await first.poll(jobs))
        finally:
            first.close()
        same, moved = (job.server_id for job in jobs)
        await asyncio.to_thread(write_tools, moved_file, versioned_listing(read_only=False))

        store = DiffReadsSeen(engine)
        poller = Poller(store, config)
        scheduler = Scheduler(store, poller, config, "restarted", tick_seconds=3600)
        scheduler.register(datetime.now(UTC) - timedelta(hours=2))  # both are due at once
        assert set(poller.indexed) == {same, moved}, "recalled from the database"
        try:
            scheduler.start()
            await scheduler.tick()
            await asyncio.to_thread(wait_until, "both polled", lambda: polls_of(store) == [2, 1, 1])
        finally:
            await scheduler.stop()
            poller.close()
    assert store.diff_reads == [moved]
    with store.sessions() as session:
        revoked = session.scalars(
            select(FindingRecord.rule).where(
                FindingRecord.server_id == moved, FindingRecord.rule == "read-only-revoked"
            )
        ).all()
    assert revoked == ["read-only-revoked"]
    assert len(digests(store, same)) == 1 and all(digests(store, moved))


def polls_of(store: Store) -> list[int]:
    """Every version's poll count, by server then version."""
    with store.sessions() as session:
        return list(
            session.scalars(select(Snapshot.poll_count).order_by(Snapshot.server_id, Snapshot.version))
        )


async def test_a_recalled_digest_the_database_moved_past_costs_only_the_hand_back(
    store: Store, tmp_path: Path
) -> None:
    """`drift-monitor poll` recalls the server's current version's digest; before its poll another
    instance records a different version. The poll sees the recalled text, so it takes the
    seen-again path (no diff before recording), and the group commit hands it back: it is
    recorded as the new version it is, with its findings."""
    with http_server("fastmcp_server.py", write_tools(tmp_path / "tools.json", versioned_listing())) as url:
        config = config_of(ServerConfig(name="s", transport="http", url=url))
        first = Poller(store, config)
        try:
            (job,) = first.jobs()
            await first.poll([job])
        finally:
            first.close()
        counting = DiffReadsSeen(store.engine)
        poller = Poller(counting, config)
        try:
            (job,) = poller.jobs()
            assert job.server_id in poller.indexed
            record_poll(
                store, job.server_id, versioned_listing(version=3, read_only=False), datetime.now(UTC)
            )
            (back,) = await poller.poll([job])
        finally:
            poller.close()
    assert counting.diff_reads == []
    assert back.new_version and back.version == 3
    assert back.fingerprint == CanonicalListing.of(versioned_listing()).fingerprint
    assert {"read-only-claimed", "description-changed"} <= {f.rule for f in back.findings}, back.findings


def test_upgrade_from_a_database_the_previous_release_filled(database_url: str) -> None:
    """A database at 0015 with a server and its version upgrades to 0016: the version has no digest
    (nothing is recalled for it) until a poll of its listing gives it one; only the server with an
    open `listing-flapping` alert is marked as possibly having one; down and up again keeps every
    row."""
    engine = make_engine(database_url)
    try:
        migrate(engine, "0015")
        listing = CanonicalListing.of(versioned_listing())
        server_id = fill_as_0015(engine, listing)
        migrate(engine)
        store = Store(engine)
        with store.sessions() as session:
            marked = dict(session.execute(select(Server.name, Server.flapping_alert_possible)).all())
        assert marked == {"old": False, "flapping": True, "settled": False}
        assert digests(store, server_id) == [None] and current_digests(store.sessions) == {}
        text = hashlib.sha256(b"listing text").digest()
        (outcome,) = record_unchanged(store, [replace(fetched_poll(server_id, listing, T0), digest=text)])
        assert outcome is not None and outcome.version == 1
        assert current_digests(store.sessions) == {server_id: (text, listing.fingerprint)}
        downgrade(engine, "0015")
        assert current_revision(engine) == "0015"
        with engine.connect() as connection:
            columns = {column["name"] for column in inspect(connection).get_columns("snapshots")}
        assert "listing_digest" not in columns and "poll_count" in columns
        with engine.connect() as connection:
            columns = {column["name"] for column in inspect(connection).get_columns("servers")}
        assert "flapping_alert_possible" not in columns and "polls_marked" in columns
        migrate(engine)
        assert digests(store, server_id) == [None]
        with store.sessions() as session:  # no table was copied: nothing cascaded from a dropped one
            assert session.scalars(select(PollAttempt.snapshot_id)).all() == [1]
            assert len(session.scalars(select(Alert.id)).all()) == 2
        record_poll(store, server_id, listing, T0 + timedelta(minutes=2))
        with store.sessions() as session:
            assert session.scalar(select(Snapshot.poll_count)) == 3
    finally:
        engine.dispose()


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
