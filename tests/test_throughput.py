"""Throughput without giving up a guarantee: group commit of unchanged polls, compact attempt rows,
kept HTTP clients, and claims refilled as polls finish."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session
from support import WAIT, http_server, raw_fleet, record_poll, versioned_listing, wait_until
from support.polls import fetched_poll

from monitor.collect.client import Limits, Target, fetch_listing
from monitor.collect.client.clients import HttpClients
from monitor.collect.client.poll import Poll
from monitor.collect.poller import Poller
from monitor.collect.scheduler import Scheduler
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.clients import DEFAULT_PROFILE
from monitor.core.fingerprint import CanonicalListing
from monitor.core.states import ServerOrigin
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store, make_engine, migrate
from monitor.store.batch import record_unchanged
from monitor.store.marks import from_epoch_ms
from monitor.store.models import Alert, ClientView, PollAttempt, PollMark, Server, Snapshot
from monitor.store.polled import RecordedPoll
from monitor.store.registration import sync_servers

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(versioned_listing()))
    return str(path)


def register(store: Store, count: int) -> list[int]:
    configs = [
        ServerConfig(name=f"s{i:03d}", transport="http", url=f"http://127.0.0.1:9/{i}") for i in range(count)
    ]
    ids = sync_servers(store, configs, T0)
    return [ids[config.name] for config in configs]


def count(engine: Engine, model: type[Any]) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(model)) or 0)


def test_unchanged_polls_commit_together_and_changed_ones_are_left_out(store: Store, engine: Engine) -> None:
    """A batch of 20 polls: the 19 that saw their server's current listing are recorded in one
    transaction (spans grow, compact marks written, server state updated); the one whose listing
    changed, and one of a server without a version yet, come back as None, untouched."""
    ids = register(store, 21)
    listing = CanonicalListing.of(versioned_listing())
    for server_id in ids[:20]:
        record_poll(store, server_id, versioned_listing(), T0)
    commits: list[int] = []
    event.listen(engine, "commit", lambda _: commits.append(1))
    at = T0 + timedelta(minutes=1)
    changed = CanonicalListing.of(versioned_listing(version=2))
    polls = [fetched_poll(sid, changed if sid == ids[7] else listing, at) for sid in ids]
    outcomes = record_unchanged(store, polls)
    assert len(commits) == 1, "one transaction for the whole batch"
    assert outcomes[7] is None and outcomes[20] is None
    recorded = [o for o in outcomes if o is not None]
    assert len(recorded) == 19 and all(o.ok and not o.new_version and o.version == 1 for o in recorded)
    with store.sessions() as session:
        spans = dict(session.execute(select(Snapshot.server_id, Snapshot.poll_count)).all())
        marks = session.execute(select(PollMark.server_id, PollMark.started_ms, PollMark.duration_ms)).all()
        last = dict(session.execute(select(Server.id, Server.last_success_at)).all())
    assert spans[ids[7]] == 1 and all(spans[sid] == 2 for sid in ids[:20] if sid != ids[7])
    assert sorted(sid for sid, _, _ in marks) == sorted(sid for sid in ids[:20] if sid != ids[7])
    assert all(from_epoch_ms(ms) == at and duration == 40 for _, ms, duration in marks)
    assert last[ids[0]] == at + timedelta(milliseconds=40) and last[ids[7]] == T0
    assert count(engine, PollAttempt) == 20, "the first polls' full rows; none for unchanged polls"


def test_a_batch_of_mixed_servers_keeps_each_ones_view_span_and_alerts(engine: Engine) -> None:
    """One batch: a server polled as before (its view's span grows), one polled by a newer client
    (the span grows and keeps what it was told), one polled under a new view label (a new span
    starts), one recovering from an outage (its `server-unreachable` alert resolves) and one
    polled without a profile. One commit; every span, state and alert as if recorded one by one."""
    store = Store(engine, attempts_kept=5, unreachable_after=1, hooks=[Alerting(base_url="http://127.0.0.1")])
    ids = register(store, 5)
    listing = CanonicalListing.of(versioned_listing())
    first = DEFAULT_PROFILE
    for server_id in ids:
        store.record(replace(fetched_poll(server_id, listing, T0), client=first))
    store.record_failure(ids[3], "connect", "refused", started_at=T0, finished_at=T0 + timedelta(seconds=1))
    newer = first.model_copy(update={"version": "99.0"})
    relabelled = first.model_copy(update={"label": "other"})
    at = T0 + timedelta(minutes=1)
    clients = [first, newer, relabelled, first, None]
    commits: list[int] = []
    event.listen(engine, "commit", lambda _: commits.append(1))
    outcomes = record_unchanged(
        store,
        [
            replace(fetched_poll(sid, listing, at), client=client)
            for sid, client in zip(ids, clients, strict=True)
        ],
    )
    assert len(commits) == 1 and all(o is not None and o.ok for o in outcomes)
    finished = at + timedelta(milliseconds=40)
    with store.sessions() as session:
        views = session.execute(
            select(
                ClientView.server_id, ClientView.profile, ClientView.poll_count, ClientView.last_seen
            ).order_by(ClientView.server_id, ClientView.id)
        ).all()
        wire = session.scalar(select(ClientView.client).where(ClientView.server_id == ids[1]))
        alerts = session.execute(select(Alert.server_id, Alert.rule, Alert.state)).all()
        failing = session.scalar(select(Server.consecutive_failures).where(Server.id == ids[3]))
    assert views == [
        (ids[0], DEFAULT_PROFILE.view, 2, finished),
        (ids[1], DEFAULT_PROFILE.view, 2, finished),
        (ids[2], DEFAULT_PROFILE.view, 1, T0 + timedelta(milliseconds=40)),
        (ids[2], "other", 1, finished),
        (ids[3], DEFAULT_PROFILE.view, 2, finished),
        (ids[4], DEFAULT_PROFILE.view, 1, T0 + timedelta(milliseconds=40)),
    ]
    assert wire is not None and wire["version"] == "99.0", "the span keeps what the server was last told"
    assert alerts == [(ids[3], "server-unreachable", "resolved")] and failing == 0


class FailFor:
    """A poll hook that fails the transaction of one server's poll, like a row the database refuses."""

    def __init__(self, server_id: int) -> None:
        self.server_id = server_id

    def after_poll(self, session: Session, poll: RecordedPoll) -> None:
        if poll.server.id == self.server_id:
            raise RuntimeError("refused")


async def test_a_failing_batch_records_every_other_poll_on_its_own(engine: Engine, tmp_path: Path) -> None:
    """Six servers polled concurrently, their unchanged listings batched; one poll cannot be
    recorded. Its batch fails as a whole, then each poll is recorded on its own: the five others
    are recorded, only the bad one fails."""
    store = Store(engine, attempts_kept=5)
    with http_server("fastmcp_server.py", tools_file(tmp_path)) as url:
        servers = [ServerConfig(name=f"s{i}", transport="http", url=url) for i in range(6)]
        config = Config(monitor=MonitorSettings(poll_timeout=WAIT), servers=servers, source="test")
        poller = Poller(store, config)
        try:
            jobs = poller.jobs()
            assert all(o.new_version for o in await poller.poll(jobs))
            store.hooks.append(FailFor(jobs[2].server_id))
            results = await asyncio.gather(*(poller.poll_one(job) for job in jobs), return_exceptions=True)
        finally:
            poller.close()
    assert isinstance(results[2], RuntimeError), results[2]
    assert all(isinstance(r, PollOutcome) and r.ok for i, r in enumerate(results) if i != 2)
    with store.sessions() as session:
        marked = set(session.scalars(select(PollMark.server_id)))
    assert marked == {job.server_id for i, job in enumerate(jobs) if i != 2}


def test_an_unchanged_poll_adds_under_64_bytes_from_the_first_poll_on(tmp_path: Path) -> None:
    """200 servers, each polled 6 times with the same listing after its first poll (1,200 unchanged
    polls, in batches of 200): the SQLite file, checkpointed, grows by under 64 bytes per poll.
    That is before any ring is full, so it is the cost of a row, not of trimming."""
    path = tmp_path / "monitor.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        migrate(engine)
        store = Store(engine, attempts_kept=100)
        ids = register(store, 200)
        listing = CanonicalListing.of(versioned_listing())
        for server_id in ids:
            record_poll(store, server_id, versioned_listing(), T0)

        def size() -> int:
            with engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            return path.stat().st_size

        before = size()
        for rounds in range(1, 7):
            at = T0 + timedelta(minutes=rounds)
            assert all(record_unchanged(store, [fetched_poll(sid, listing, at) for sid in ids]))
        grown = size() - before
    finally:
        engine.dispose()
    assert count_rows(path, "poll_marks") == 1200
    assert grown / 1200 < 64, f"{grown / 1200:.1f} bytes per unchanged poll"


def count_rows(path: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return int(connection.execute(f"select count(*) from {table}").fetchone()[0])


async def test_a_kept_client_carries_the_next_poll_on_the_same_connection() -> None:
    """Two polls of a Streamable HTTP server that answers in JSON, through kept clients: the second
    is sent on the connection the first left open (the same local port), and both see the listing."""
    with raw_fleet(1) as served:
        (url,) = served.urls
        clients = HttpClients(keepalive=60)
        target = Target(name="s", transport="http", url=url, origin=ServerOrigin.CONFIG)
        try:
            first = await fetch_listing(target, Limits(timeout=WAIT), clients)
            after_first = established_ports(url)
            second = await fetch_listing(target, Limits(timeout=WAIT), clients)
            after_second = established_ports(url)
        finally:
            await clients.aclose()
    assert first.tools == second.tools and len(first.tools) == 5
    assert len(clients) == 0
    assert len(after_first) == 1 and after_first == after_second, (after_first, after_second)


async def test_a_poll_on_a_kept_client_leaves_nothing_for_the_garbage_collector() -> None:
    """What a poll builds is freed by reference counting as it ends. A reference cycle per poll (a
    cancelled task's traceback, the session and its dispatcher holding each other) once held the
    poll and its listing, about 500 objects a poll, until a collection found them: at 5,000 servers
    a minute the collector's walks cost the event loop 0.75 ms per poll."""
    with raw_fleet(1) as served:
        (url,) = served.urls
        clients = HttpClients(keepalive=60)
        target = Target(name="s", transport="http", url=url, origin=ServerOrigin.CONFIG)
        try:
            await fetch_listing(target, Limits(timeout=WAIT), clients)  # the kept client is made
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds is kept in gc.garbage, not freed
            try:
                for _ in range(3):
                    await fetch_listing(target, Limits(timeout=WAIT), clients)
                gc.collect()
                left = [f"{type(thing).__module__}.{type(thing).__qualname__}" for thing in gc.garbage]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
        finally:
            await clients.aclose()
    assert left == []


def established_ports(url: str) -> set[int]:
    """Local ports of this machine's established TCP connections to the URL's port (from /proc)."""
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    found: set[int] = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            found.add(int(local.split(":")[1], 16))
    return found


def test_a_changed_target_gets_a_new_client() -> None:
    async def run() -> None:
        clients = HttpClients(keepalive=60)
        target = Target(name="s", transport="http", url="http://127.0.0.1:9/mcp", origin=ServerOrigin.CONFIG)
        first = clients.client(target, Limits())
        assert clients.client(target, Limits()) is first
        moved = Target(name="s", transport="http", url="http://127.0.0.1:10/mcp", origin=ServerOrigin.CONFIG)
        assert clients.client(moved, Limits()) is not first and len(clients) == 1
        assert clients.forget("s") and not clients.forget("s")
        await clients.aclose()

    asyncio.run(run())


async def test_claims_refill_as_polls_finish(store: Store, tmp_path: Path) -> None:
    """poll_concurrency 2, ten servers due, and one tick of the clock: every server is polled,
    because each finished poll claims the slot it freed instead of waiting for the next tick."""
    with http_server("fastmcp_server.py", tools_file(tmp_path)) as url:
        servers = [ServerConfig(name=f"s{i}", transport="http", url=url) for i in range(10)]
        config = Config(
            monitor=MonitorSettings(poll_interval=3600, poll_timeout=WAIT, poll_concurrency=2),
            servers=servers,
            source="test",
        )
        poller = Poller(store, config)
        scheduler = Scheduler(store, poller, config, "me", tick_seconds=3600)
        scheduler.register(datetime.now(UTC) - timedelta(hours=2))  # every first slot is due
        try:
            scheduler.start()  # its clock first ticks in an hour: only the tick below and refills run
            await scheduler.tick()

            def polled() -> int:
                with store.sessions() as session:
                    return int(session.scalar(select(func.count(func.distinct(PollAttempt.server_id)))) or 0)

            await asyncio.to_thread(wait_until, "every server polled", lambda: polled() == 10, timeout=WAIT)
        finally:
            await scheduler.stop()
            poller.close()
    with store.sessions() as session:
        assert session.scalar(select(func.count()).where(Server.lease_owner.is_not(None))) == 0


class MethodsSeen(Poll):
    """A poll that notes the HTTP method of every answer it gets (the transport calls this hook)."""

    def __init__(self, target: Target, limits: Limits, clients: HttpClients | None) -> None:
        super().__init__(target, limits, clients)
        self.methods: list[str] = []

    async def _on_response(self, response: httpx2.Response) -> None:
        self.methods.append(response.request.method)
        await super()._on_response(response)


@pytest.mark.parametrize("kept", [True, False])
async def test_a_poll_opens_no_notification_stream(tmp_path: Path, kept: bool) -> None:
    """A poll reads one listing and ends its session, so it sends no GET for server notifications
    (a stateful SDK server would hold one open): only the POSTs of the protocol and the DELETE
    that ends the session, on a kept client or on a client of its own."""
    with http_server("fastmcp_server.py", tools_file(tmp_path)) as url:
        clients = HttpClients(keepalive=60) if kept else None
        target = Target(name="s", transport="http", url=url, origin=ServerOrigin.CONFIG)
        poll = MethodsSeen(target, Limits(timeout=WAIT), clients)
        try:
            listing = await poll.run()
        finally:
            if clients is not None:
                await clients.aclose()
    assert [t["name"] for t in listing.tools] == ["search", "delete"]
    assert "GET" not in poll.methods and poll.methods.count("DELETE") == 1, poll.methods
    assert poll.methods[0] == "POST" and len(poll.methods) >= 4, poll.methods


async def test_a_listing_seen_again_keeps_its_fingerprint_and_a_changed_one_is_indexed(
    store: Store, tmp_path: Path
) -> None:
    """The poller skips checking and canonicalising a listing whose JSON is the one its server sent
    last time. The same listing keeps its fingerprint; a changed one gets its own; and when the
    stored version moved meanwhile (another instance recorded one), the listing seen again is
    recorded as a new version whose tools are the server's, though its forms were left lazy."""
    path = Path(tools_file(tmp_path))
    with http_server("fastmcp_server.py", str(path)) as url:
        config = Config(
            monitor=MonitorSettings(poll_timeout=WAIT),
            servers=[ServerConfig(name="s", transport="http", url=url)],
            source="test",
        )
        poller = Poller(store, config)
        try:
            (job,) = poller.jobs()
            first = await poller.poll_one(job)
            again = await poller.poll_one(job)
            record_poll(store, job.server_id, versioned_listing(version=3), datetime.now(UTC))
            back = await poller.poll_one(job)
            await asyncio.to_thread(path.write_text, json.dumps(versioned_listing(version=2)))
            changed = await poller.poll_one(job)
        finally:
            poller.close()
    expected = CanonicalListing.of(versioned_listing())
    assert first.new_version and first.fingerprint == expected.fingerprint
    assert not again.new_version and again.fingerprint == expected.fingerprint and again.tool_count == 2
    assert back.new_version and back.fingerprint == expected.fingerprint and back.version == 3
    assert (
        changed.new_version
        and changed.fingerprint == CanonicalListing.of(versioned_listing(version=2)).fingerprint
    )
    with store.sessions() as session:
        versions = session.scalars(
            select(Snapshot.version).where(Snapshot.server_id == job.server_id).order_by(Snapshot.version)
        ).all()
    assert versions == [1, 2, 3, 4]
