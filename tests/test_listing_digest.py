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
from sqlalchemy import Engine, select
from support import WAIT, http_server, record_poll, versioned_listing, wait_until
from support.polls import DiffReadsSeen, fetched_poll, version_digests

from monitor.collect.poller import Poller
from monitor.collect.scheduler import Scheduler
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store
from monitor.store.batch import record_unchanged
from monitor.store.digests import current_digests
from monitor.store.models import FindingRecord, Snapshot
from monitor.store.registration import sync_servers

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SECRET = "sekrit-token-4242"


def write_tools(path: Path, listed: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps(listed))
    return str(path)


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
    assert version_digests(store, a) == [text] and version_digests(store, b) == [None]
    assert current_digests(store.sessions) == {a: (text, listing.fingerprint), c: (text, listing.fingerprint)}

    at = T0 + timedelta(minutes=1)
    polls = [replace(fetched_poll(sid, listing, at), digest=other) for sid in (a, b)]
    assert all(record_unchanged(store, polls))
    store.record(fetched_poll(c, changed, at))
    assert version_digests(store, a) == [text], "a version keeps the first text it was seen as"
    assert version_digests(store, b) == [other], "a version stored without a digest takes the next poll's"
    assert version_digests(store, c) == [text, None]
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
    kept, redacted = (version_digests(store, job.server_id) for job in jobs)
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
    assert len(version_digests(store, same)) == 1 and all(version_digests(store, moved))


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
