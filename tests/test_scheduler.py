"""Claiming polls through the database: exclusive, one per interval, taken over after a lease runs
out, and at each server's slot rather than at the clock's next tick."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session
from support import WAIT, refused_url

from monitor.collect.instancelock import InstanceLockError, lock_sqlite
from monitor.collect.poller import Poller
from monitor.collect.scheduler import LEASE_MARGIN, LeaseRelease, Scheduler
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import Store
from monitor.store.models import Server
from monitor.store.polled import RecordedPoll

INTERVAL = 60.0


def make_config(count: int) -> Config:
    servers = [
        ServerConfig(name=f"s{i:03d}", transport="http", url=f"http://127.0.0.1:9/{i}") for i in range(count)
    ]
    return Config(
        monitor=MonitorSettings(poll_interval=INTERVAL, poll_timeout=10, poll_concurrency=1000),
        servers=servers,
        source="test",
    )


@pytest.fixture
def schedulers(store: Store) -> Iterator[tuple[Scheduler, Scheduler]]:
    config = make_config(50)
    pollers = [Poller(store, config), Poller(store, config)]
    pair = (
        Scheduler(store, pollers[0], config, "a"),
        Scheduler(store, pollers[1], config, "b"),
    )
    yield pair
    for poller in pollers:
        poller.close()


def test_first_polls_are_spread_over_one_interval(
    schedulers: tuple[Scheduler, Scheduler], store: Store
) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    schedulers[0].register(now)
    schedulers[1].register(now)  # a second instance keeps the first one's schedule
    with store.sessions() as session:
        due = [row for row in session.scalars(select(Server.next_poll_at))]
    offsets = sorted((at - now).total_seconds() for at in due if at is not None)
    assert len(offsets) == 50
    assert offsets[0] >= 0 and offsets[-1] <= INTERVAL
    assert offsets[-1] - offsets[0] > INTERVAL / 2, "spread, not fired at once"


def test_each_server_is_claimed_once_per_interval(
    schedulers: tuple[Scheduler, Scheduler], store: Store
) -> None:
    a, b = schedulers
    start = datetime(2026, 1, 1, tzinfo=UTC)
    a.register(start)
    claims: dict[int, list[tuple[str, datetime]]] = {}
    for step in range(0, int(INTERVAL * 3), 5):  # three intervals, a tick every 5 s, both instances
        now = start + timedelta(seconds=step)
        for scheduler in (a, b) if step % 10 else (b, a):
            for server_id in scheduler.claim(now, 1000):
                claims.setdefault(server_id, []).append((scheduler.owner, now))
            scheduler._release_leases([])  # the polls finished
    assert len(claims) == 50
    for server_claims in claims.values():
        times = [at for _, at in server_claims]
        assert len(times) in (2, 3)
        gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
        assert all(gap >= INTERVAL - 5 for gap in gaps), gaps


def test_concurrent_claims_are_disjoint(schedulers: tuple[Scheduler, Scheduler], store: Store) -> None:
    if store.engine.dialect.name != "postgresql":
        pytest.skip("SQLite runs one instance, enforced by its lock file")
    a, b = schedulers
    now = datetime(2026, 1, 1, tzinfo=UTC)
    a.register(now - timedelta(seconds=INTERVAL))
    results: dict[str, list[int]] = {}
    barrier = threading.Barrier(2)

    def claim(scheduler: Scheduler) -> None:
        barrier.wait()
        results[scheduler.owner] = scheduler.claim(now, 1000)

    threads = [threading.Thread(target=claim, args=(s,)) for s in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert set(results["a"]).isdisjoint(results["b"])
    assert len(results["a"]) + len(results["b"]) == 50


def test_a_dead_instance_is_taken_over_after_its_lease(
    schedulers: tuple[Scheduler, Scheduler], store: Store
) -> None:
    a, b = schedulers
    now = datetime(2026, 1, 1, tzinfo=UTC)
    a.register(now - timedelta(seconds=INTERVAL))
    taken = a.claim(now, 1000)  # a dies holding every lease
    assert len(taken) == 50
    one_interval = now + timedelta(seconds=INTERVAL)
    assert b.claim(now + timedelta(seconds=5), 1000) == [], "leases and the schedule hold"
    lease_end = now + timedelta(seconds=10) + LEASE_MARGIN
    later = max(one_interval, lease_end) + timedelta(seconds=1)
    assert sorted(b.claim(later, 1000)) == sorted(taken)


def test_second_sqlite_instance_refuses_to_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'monitor.db'}"
    first = lock_sqlite(url)
    assert first is not None
    try:
        holder = r"drift-monitor serve \(pid \d+\) is already running .*use PostgreSQL"
        with pytest.raises(InstanceLockError, match=holder):
            lock_sqlite(url)
    finally:
        first.close()
    again = lock_sqlite(url)
    assert again is not None
    again.close()
    assert lock_sqlite("postgresql+psycopg://x@127.0.0.1/db") is None


class PollsRecorded:
    """Poll hook: `twice` is set once two polls are recorded."""

    def __init__(self) -> None:
        self.count = 0
        self.twice = threading.Event()

    def after_poll(self, session: Session, poll: RecordedPoll) -> None:
        self.count += 1
        if self.count >= 2:
            self.twice.set()


def one_server(interval: float) -> Config:
    """One server where nothing listens (a poll of it fails at once), polled every `interval` s."""
    server = ServerConfig(name="soon", transport="http", url=refused_url(), interval=interval)
    return Config(monitor=MonitorSettings(poll_timeout=10), servers=[server], source="test")


async def test_a_server_is_claimed_at_its_slot_not_at_the_clock_tick(store: Store) -> None:
    """The clock ticks once an hour here, so only the slot timer can claim: a tick claims the server
    when it becomes due and arms the timer for its next slot, one second on, when the timer's tick
    claims it again. With only the clock, a due server waited for its next tick: up to a second
    past its slot (a 5 s interval became up to 6 s)."""
    config = one_server(interval=1.0)
    poller = Poller(store, config)
    scheduler = Scheduler(store, poller, config, "me", tick_seconds=3600)
    polls = PollsRecorded()
    store.hooks += [LeaseRelease("me"), polls]
    scheduler.register(datetime.now(UTC))
    with store.sessions.begin() as session:
        (row,) = session.scalars(select(Server))
        row.next_poll_at = datetime.now(UTC) + timedelta(seconds=0.3)  # shortly after start
    try:
        scheduler.start()
        polled = await asyncio.to_thread(polls.twice.wait, WAIT)
        assert polled, f"{polls.count} polls with the clock an hour apart"
    finally:
        await scheduler.stop()
        poller.close()


def test_the_slot_timer_waits_for_the_next_server_due_that_a_claim_could_take(
    schedulers: tuple[Scheduler, Scheduler], store: Store
) -> None:
    """Servers already due and left unclaimed wait for a free slot in their lane, which the end of a
    poll claims: a timer for their time would fire at once, find the lane still full, and be armed
    again, in a loop. Another instance's live lease is its poll under way; this instance's own
    leases are freed by its polls' records, which run no tick, so their next slots count. A server
    on a minute's interval is left to the clock: a second's delay stretches it by under 5%."""
    a, _ = schedulers
    now = datetime(2026, 1, 1, tzinfo=UTC)
    a.register(now)
    with store.sessions.begin() as session:
        late, theirs, expired, own, later, minutely, *rest = session.scalars(
            select(Server).order_by(Server.id)
        )
        for row in (late, theirs, expired, own, later, *rest):
            row.interval_seconds = 5
        minutely.interval_seconds = 60
        minutely.next_poll_at = now + timedelta(seconds=0.5)
        late.next_poll_at = now - timedelta(seconds=5)
        theirs.next_poll_at = now + timedelta(seconds=1)
        theirs.lease_owner, theirs.lease_expires_at = "b", now + timedelta(seconds=30)
        expired.next_poll_at = now + timedelta(seconds=2)
        expired.lease_owner, expired.lease_expires_at = "b", now - timedelta(seconds=1)
        own.next_poll_at = now + timedelta(seconds=3)
        own.lease_owner, own.lease_expires_at = "a", now + timedelta(seconds=30)
        later.next_poll_at = now + timedelta(seconds=4)
        for row in rest:
            row.next_poll_at = now + timedelta(seconds=10)
    assert a.next_slot(now) == now + timedelta(seconds=2)
    with store.sessions.begin() as session:
        session.get_one(Server, expired.id).next_poll_at = now + timedelta(seconds=5)
    assert a.next_slot(now) == now + timedelta(seconds=3), "its own lease: its poll under way"
    assert a.next_slot(now + timedelta(hours=1)) is None


async def test_stop_leaves_no_slot_timer_armed(store: Store) -> None:
    config = one_server(interval=3600)
    poller = Poller(store, config)
    scheduler = Scheduler(store, poller, config, "me", tick_seconds=3600)
    scheduler.register(datetime.now(UTC))  # the first slot within the hour
    try:
        await scheduler.tick()
        armed = scheduler.slot_timer
        assert armed is not None and not armed.cancelled()
        await scheduler.stop()
        assert scheduler.slot_timer is None and armed.cancelled()
    finally:
        poller.close()
