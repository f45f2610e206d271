"""Servers that flood list-changed notifications or never answer must not take the monitor's time.

What must hold: a storm of notifications is one pending re-poll per server (one write, not two per
notification) and re-polls keep a minimum gap after the server's last poll began; servers that hang
until their timeout have a budget of their own, so a server that answers keeps being polled at its
interval while every slot of theirs is taken.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select
from support import WAIT, faulty_http, http_server, tool, wait_until

from monitor.collect.poller import Poller
from monitor.collect.scheduler import Lane, LeaseRelease, Scheduler
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import Store
from monitor.store.models import Server, Snapshot


def server_updates(store: Store) -> list[str]:
    """Every UPDATE of the servers table the store's engine runs from now on."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE SERVERS"):
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", record)
    return seen


def storm(scheduler: Scheduler, server_id: int, count: int) -> int:
    """`count` notifications from four threads at once; how many the scheduler acted on."""
    accepted: list[bool] = []
    lock = threading.Lock()

    def notify() -> None:
        for _ in range(count // 4):
            taken = scheduler.poll_soon(server_id, last_notification_at=datetime.now(UTC))
            with lock:
                accepted.append(taken)

    threads = [threading.Thread(target=notify) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(accepted) == count
    return sum(accepted)


def test_a_notification_storm_is_one_pending_repoll_with_a_minimum_gap(store: Store) -> None:
    config = Config(
        monitor=MonitorSettings(poll_interval=3600, poll_timeout=10, list_changed_min_gap=600),
        servers=[ServerConfig(name="noisy", transport="http", url="http://127.0.0.1:9/mcp")],
        source="test",
    )
    poller = Poller(store, config)
    try:
        scheduler = Scheduler(store, poller, config, "a")
        scheduler.register(datetime.now(UTC))
        (server_id,) = scheduler.targets
        updates = server_updates(store)

        assert storm(scheduler, server_id, 400) == 1, "one pending re-poll, however many notifications"
        assert len(updates) == 1, "one write for the whole storm"
        assert scheduler.claim(datetime.now(UTC), 10) == [server_id], "due at once: no poll began lately"
        scheduler._release_leases([])  # the poll ended

        began = datetime.now(UTC)
        assert storm(scheduler, server_id, 400) == 1, "the storm goes on: one more re-poll, no more"
        with store.sessions() as session:
            due = session.scalar(select(Server.next_poll_at).where(Server.id == server_id))
        assert due is not None and due > began + timedelta(seconds=300), "not before the minimum gap"
        assert scheduler.claim(datetime.now(UTC), 10) == []
        assert scheduler.claim(due, 10) == [server_id]
    finally:
        poller.close()


@contextmanager
def running(scheduler: Scheduler) -> Iterator[None]:
    """The scheduler ticking on an event loop of its own thread; stopped (in-flight polls abandoned) after."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> None:
        scheduler.start()

    try:
        asyncio.run_coroutine_threadsafe(start(), loop).result(WAIT)
        yield
    finally:
        asyncio.run_coroutine_threadsafe(scheduler.stop(grace=0), loop).result(WAIT)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT)
        loop.close()


@pytest.mark.slow
def test_servers_that_never_answer_do_not_starve_one_that_does(store: Store, tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([tool("lookup", read_only=True)]), encoding="utf-8")
    with faulty_http() as (_, silent), http_server("fastmcp_server.py", str(tools_file)) as healthy_url:
        hanging = [ServerConfig(name=f"hang{i:02d}", transport="http", url=silent) for i in range(24)]
        healthy = ServerConfig(name="healthy", transport="http", url=healthy_url)
        config = Config(
            monitor=MonitorSettings(
                poll_interval=1, poll_timeout=120, poll_concurrency=2, suspect_poll_concurrency=2
            ),
            servers=[healthy, *hanging],
            source="test",
        )
        poller = Poller(store, config)
        try:
            scheduler = Scheduler(store, poller, config, "a", tick_seconds=0.2)
            store.hooks.append(LeaseRelease("a"))  # as `serve` does: a recorded poll gives its lease back
            now = datetime.now(UTC)
            scheduler.register(now)
            ids = {name: server_id for server_id, name in ((i, t.name) for i, t in scheduler.targets.items())}
            # The steady state the issue describes: the healthy server answered last time, the others
            # timed out (a first poll of each would cost the test two minutes).
            assert asyncio.run(poller.poll(poller.jobs(["healthy"])))[0].ok
            for server in hanging:
                store.record_failure(
                    ids[server.name], "timeout", "no answer", started_at=now, finished_at=now
                )

            def healthy_polls() -> int:
                with store.sessions() as session:
                    counts = session.scalars(
                        select(Snapshot.poll_count).where(Snapshot.server_id == ids["healthy"])
                    )
                    return sum(counts)

            with running(scheduler):
                wait_until(
                    "hanging polls holding every slot of their lane", lambda: len(scheduler.lanes) >= 2
                )
                wait_until("six polls of the healthy server", lambda: healthy_polls() >= 6)
                hung = [i for i, lane in scheduler.lanes.items() if lane is Lane.SUSPECT]
                assert len(hung) == 2, "the hanging servers filled their own lane, and only theirs"
        finally:
            poller.close()


@pytest.mark.slow
def test_slow_and_oversized_servers_are_claimed_only_in_their_own_lane(store: Store, tmp_path: Path) -> None:
    """A server whose poll outlasted `heavy_poll_seconds` (a body trickling until the timeout) and one
    whose listing was refused as too big go to the heavy lane after that poll: the lanes of servers
    that answer quickly, and of servers not known to answer, no longer claim them."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([tool("lookup", read_only=True)]), encoding="utf-8")
    with faulty_http() as (base, _), http_server("fastmcp_server.py", str(tools_file)) as healthy_url:
        servers = [
            ServerConfig(name="healthy", transport="http", url=healthy_url),
            ServerConfig(name="huge", transport="http", url=f"{base}/huge/mcp"),
            ServerConfig(name="slow", transport="http", url=f"{base}/trickle/mcp"),
        ]
        config = Config(
            monitor=MonitorSettings(poll_interval=3600, poll_timeout=3, heavy_poll_seconds=2.5),
            servers=servers,
            source="test",
        )
        poller = Poller(store, config)
        try:
            scheduler = Scheduler(store, poller, config, "a", tick_seconds=0.2)
            store.hooks.append(LeaseRelease("a"))
            now = datetime.now(UTC)
            scheduler.register(now)
            ids = {target.name: server_id for server_id, target in scheduler.targets.items()}
            with store.sessions.begin() as session:  # all due now, not spread over the hour
                for row in session.scalars(select(Server)):
                    row.next_poll_at = now

            def polled() -> bool:
                with store.sessions() as session:
                    return (
                        all(row.last_poll_at is not None for row in session.scalars(select(Server)))
                        and not scheduler.in_flight
                    )

            with running(scheduler):
                wait_until("every server polled once", polled)
            assert scheduler.heavy == {ids["huge"], ids["slow"]}

            later, heavy = now + timedelta(hours=2), frozenset(scheduler.heavy)
            assert scheduler.claim(later, 10, lane=Lane.SUSPECT, heavy=heavy) == []
            assert scheduler.claim(later, 10, lane=Lane.ANSWERING, heavy=heavy) == [ids["healthy"]]
            assert sorted(scheduler.claim(later, 10, lane=Lane.HEAVY, heavy=heavy)) == sorted(heavy)
        finally:
            poller.close()


def test_a_tick_that_finds_the_lane_full_keeps_refilling_it(store: Store, tmp_path: Path) -> None:
    """When a poll ends and more servers are due, its slot is claimed again at once, not at the next
    clock tick; a tick that found the lane full must not stop that (it did: one instance then polled
    only what each second's tick claimed, near 60 polls a second whatever the concurrency). The
    clock never ticks here (an hour apart): only refills can claim past the first two servers."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([tool("lookup", read_only=True)]), encoding="utf-8")
    with http_server("fastmcp_server.py", str(tools_file)) as url:
        servers = [ServerConfig(name=f"s{i}", transport="http", url=url) for i in range(8)]
        config = Config(
            monitor=MonitorSettings(poll_interval=3600, poll_timeout=30, poll_concurrency=2),
            servers=servers,
            source="test",
        )
        poller = Poller(store, config)
        try:
            scheduler = Scheduler(store, poller, config, "a", tick_seconds=3600)
            store.hooks.append(LeaseRelease("a"))
            now = datetime.now(UTC)
            scheduler.register(now)
            outcomes = asyncio.run(poller.poll(poller.jobs([server.name for server in servers])))
            assert all(outcome.ok for outcome in outcomes)  # all answering: one lane of two slots
            with store.sessions.begin() as session:
                for row in session.scalars(select(Server)):
                    row.next_poll_at = now

            def claimed() -> bool:
                with store.sessions() as session:
                    due = session.scalars(select(Server.next_poll_at)).all()
                return all(at is not None and at > now + timedelta(minutes=30) for at in due)

            async def two_ticks() -> None:
                await scheduler.tick()  # claims two: the lane is full
                await scheduler.tick()  # finds it full

            with running(scheduler):
                assert scheduler.loop is not None
                asyncio.run_coroutine_threadsafe(two_ticks(), scheduler.loop).result(WAIT)
                wait_until("every server claimed as slots came free", claimed)
        finally:
            poller.close()
