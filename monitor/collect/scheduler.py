"""Scheduling polls across any number of `serve` processes that share one database.

APScheduler is each process's clock: a tick every second claims the servers that are due. For
servers on short intervals, which a second's delay would stretch, each tick also arms a timer for
the moment the next one becomes due, so it is claimed at its slot (`Scheduler.next_slot`).

The database is the coordinator. Claiming a server moves its `next_poll_at` one interval on and
takes a lease on the row, under `FOR UPDATE SKIP LOCKED` on PostgreSQL, so two processes never poll
a server in the same interval, and a dead process's servers come back when its lease runs out.
SQLite allows one process, enforced by a lock file next to the database (`instancelock`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from sqlalchemy import and_, bindparam, case, func, not_, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import BindParameter

from monitor.collect.client import Target
from monitor.collect.client.clients import HttpClients
from monitor.collect.poller import Job, Poller
from monitor.collect.targets import api_target, limits_for, resolve_targets
from monitor.config import Config, ServerConfig
from monitor.core.states import PollErrorKind
from monitor.store import PollOutcome, Store
from monitor.store.models import Server
from monitor.store.polled import RecordedPoll
from monitor.store.registration import sync_servers

log = logging.getLogger("drift_monitor.scheduler")

LEASE_MARGIN = timedelta(seconds=30)
"""How long past a poll's own timeout a lease lasts: a process silent for that long is dead."""
KEEPALIVE_MARGIN = 30.0
"""Seconds an idle kept connection outlasts the longest poll interval, so the next poll finds it."""
SLOT_TIMER_FLOOR = 0.05
"""The soonest, in seconds from now, the slot timer runs a tick: at most 20 timer ticks a second,
however many servers fall due, each claiming what fell due since the last."""
SLOT_TIMER_SHARE = 0.05
"""The slot timer is for servers whose interval a clock tick's delay would stretch by more than
this share: with the clock every second, intervals under 20 s. A fleet on a minute or more is
claimed by the clock alone, so the timer adds no transaction per slot where one would not matter."""


def instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Lane(enum.Enum):
    """A claimed server's lane: each has its own budget of concurrent polls (`Scheduler.tick`)."""

    ANSWERING = "answering"
    """The last poll succeeded, quickly and small."""
    SUSPECT = "suspect"
    """Never polled, or the last poll failed."""
    HEAVY = "heavy"
    """This process's last poll of it was slow or big, or refused as too big (`Scheduler._weigh`)."""


class LeaseRelease:
    """Poll hook: a finished poll gives its lease back in the same transaction that records it."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def after_poll(self, session: Session, poll: RecordedPoll) -> None:
        if poll.listen_ack:  # a watch session's record, not a poll
            return
        if poll.server.lease_owner == self.owner:
            poll.server.lease_owner = None
            poll.server.lease_expires_at = None


class Scheduler:
    def __init__(
        self,
        store: Store,
        poller: Poller,
        config: Config,
        owner: str,
        *,
        tick_seconds: float = 1.0,
    ) -> None:
        self.store = store
        self.poller = poller
        self.config = config
        self.owner = owner
        self.tick_seconds = tick_seconds
        self.clock = AsyncIOScheduler(timezone=UTC)
        self.in_flight: dict[int, asyncio.Task[PollOutcome | None]] = {}
        self.lanes: dict[int, Lane] = {}
        """Each claimed server's lane until its poll ends."""
        self.heavy: set[int] = set()
        """Servers whose last poll by this process was slow or big (`Lane.HEAVY`)."""
        self.targets: dict[int, Target] = {}
        self._configs = {server.name: server for server in config.servers}
        """Each config server by name: a poll's limits are looked up per poll, not by a scan of the fleet."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tick_lock = asyncio.Lock()
        self._ticks: set[asyncio.Task[None]] = set()
        self.slot_timer: asyncio.TimerHandle | None = None
        """Runs a tick when the next server becomes due (`_arm_slot_timer`); None while none is armed."""
        self._backlog = False
        """The last tick took all it could, or found a lane full: more servers may be due as soon as
        polls finish. (A tick that found a lane full used to clear it, and then only the next clock
        tick claimed: that, not the database, capped one instance near 60 polls a second.)"""
        self._refill: asyncio.Task[None] | None = None
        self._stopping = False
        self._postgres = store.engine.dialect.name == "postgresql"
        self._soon_lock = threading.Lock()
        self._soon: dict[int, float] = {}
        """Servers with a re-poll pending from a notification: when it is due (monotonic)."""
        self._started: dict[int, float] = {}
        """When this process last began polling each server (monotonic)."""

    def register(self, now: datetime) -> None:
        """Sync config servers, spreading first polls over one interval so they do not fire at once,
        and tell the poller which listing every server's current version was polled as (`recall`)."""
        ids = sync_servers(self.store, self.config.servers, now)
        default = self.config.monitor.poll_interval
        with self.store.sessions.begin() as session:
            for server in self.config.servers:
                row = session.get(Server, ids[server.name])
                assert row is not None
                row.interval_seconds = server.interval
                if row.next_poll_at is None:
                    row.next_poll_at = now + timedelta(seconds=random.uniform(0, server.interval or default))  # noqa: S311
        targets, skipped = resolve_targets(self.config, self.config.servers)
        for line in skipped:  # registered all the same: its history stays, decisions see it age
            log.warning("%s", line, extra={"event": "server.skipped"})
        self.config.skipped += [line for line in skipped if line not in self.config.skipped]
        self.targets = {ids[name]: target for name, target in targets.items()}
        self.poller.recall()  # every server's: this instance may poll those registered over the API too

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        intervals = [s.interval or 0.0 for s in self.config.servers] + [self.config.monitor.poll_interval]
        self.poller.clients = HttpClients(keepalive=max(intervals) + KEEPALIVE_MARGIN)
        self.clock.add_job(self.tick, "interval", seconds=self.tick_seconds, max_instances=1, coalesce=True)
        self.clock.start()
        self._tick_now()  # what is due now, and the slot timer: not one clock tick later

    async def tick(self, *, arm: bool = True) -> None:
        """Claim due servers up to each lane's free budget and start their polls.

        Three lanes with budgets of their own (`Lane`): servers whose last poll succeeded
        (`poll_concurrency`), servers not known to answer, never polled or failing
        (`suspect_poll_concurrency`), and servers whose last poll here was slow or big
        (`heavy_poll_concurrency`). So hundreds of servers that hang until their timeout, answer
        slowly, or answer with huge listings cannot take the slots of those that answer quickly.

        Then (unless `arm` is False: a refill, which leaves the timer as it is) the slot timer is
        armed for when the next server becomes due whose interval the clock would stretch
        (`next_slot`).
        """
        claimed: list[int] = []
        async with self._tick_lock:  # the clock's, the slot timer's and notification ticks take turns
            if self._stopping:
                return
            now = datetime.now(UTC)
            monitor = self.config.monitor
            self._backlog = False
            heavy = frozenset(self.heavy)
            for lane, budget in (
                (Lane.ANSWERING, monitor.poll_concurrency),
                (Lane.SUSPECT, monitor.suspect_poll_concurrency),
                (Lane.HEAVY, monitor.heavy_poll_concurrency),
            ):
                capacity = budget - sum(1 for taken in self.lanes.values() if taken is lane)
                if capacity <= 0:  # full: more may be due, so its next free slot is claimed at once
                    self._backlog = True
                elif heavy or lane is not Lane.HEAVY:
                    ids = await asyncio.to_thread(
                        self.claim, datetime.now(UTC), capacity, lane=lane, heavy=heavy
                    )
                    self.lanes.update(dict.fromkeys(ids, lane))
                    self._backlog = self._backlog or len(ids) == capacity
                    claimed += ids
            if arm:
                try:
                    slot = await asyncio.to_thread(self.next_slot, now)
                except Exception:  # the polls claimed above start all the same; the clock ticks on
                    log.exception("could not read when the next server is due")
                    slot = None
                self._arm_slot_timer(slot)
        for server_id in claimed:
            target = self.targets.get(server_id) or await asyncio.to_thread(self._api_target, server_id)
            if target is None:
                self.lanes.pop(server_id, None)
                continue
            job = Job(server_id, target, limits_for(self.config.monitor, self._server_config(target.name)))
            task = asyncio.create_task(self._run(job))
            self.in_flight[server_id] = task

    def next_slot(self, now: datetime) -> datetime | None:
        """When the next server becomes due after `now` that a claim could take: its lease free, run
        out, or this process's own. One `MIN` on the `next_poll_at` index.

        This process's leases are its polls under way, and each poll's record frees its lease
        (`LeaseRelease`) without a tick: leaving them out would leave every server's next slot to the
        clock. A server already due at `now` that the tick left unclaimed is waiting for a free slot
        in its lane, and the end of a poll claims that (`_run`): a timer for it would fire at once,
        find the lane still full, and be armed again, over and over.

        Only servers on an interval the clock's tick would stretch by more than `SLOT_TIMER_SHARE`
        count: the others are claimed by the clock.
        """
        short = self.tick_seconds / SLOT_TIMER_SHARE
        interval = func.coalesce(Server.interval_seconds, self.config.monitor.poll_interval)
        with self.store.sessions() as session:
            return session.scalar(
                select(func.min(Server.next_poll_at)).where(
                    Server.next_poll_at > now,
                    interval < short,
                    or_(
                        Server.lease_expires_at.is_(None),
                        Server.lease_expires_at < now,
                        Server.lease_owner == self.owner,
                    ),
                )
            )

    def _arm_slot_timer(self, due: datetime | None) -> None:
        """Run a tick at `due` (no sooner than `SLOT_TIMER_FLOOR` from now), in place of the timer
        armed before; no timer for None (nothing is due later: the clock's tick still runs)."""
        if self.slot_timer is not None:
            self.slot_timer.cancel()
            self.slot_timer = None
        if due is None:
            return
        loop = asyncio.get_running_loop()
        wait = max((due - datetime.now(UTC)).total_seconds(), SLOT_TIMER_FLOOR)
        self.slot_timer = loop.call_at(loop.time() + wait, self._tick_now)

    def _server_config(self, name: str) -> ServerConfig | None:
        return self._configs.get(name)

    async def _run(self, job: Job) -> PollOutcome | None:
        started = time.monotonic()
        try:
            outcome = await self.poller.poll_one(job)
            self._weigh(job.server_id, outcome, time.monotonic() - started)
            return outcome
        except Exception:
            log.exception("poll of %s failed unexpectedly", job.target.name)
            return None
        finally:
            self.in_flight.pop(job.server_id, None)
            self.lanes.pop(job.server_id, None)
            if self._backlog and (self._refill is None or self._refill.done()):
                # Claim what this poll's slot freed now, not at the next tick: one tick's claims
                # would otherwise cap the rate at `poll_concurrency` polls a second.
                self._refill = asyncio.get_running_loop().create_task(self.tick(arm=False))

    def _weigh(self, server_id: int, outcome: PollOutcome, seconds: float) -> None:
        """Put a server in the heavy lane when its poll was slow or big, and out when it was neither."""
        monitor = self.config.monitor
        heavy = (
            seconds > monitor.heavy_poll_seconds
            or outcome.listing_bytes > monitor.heavy_listing_bytes
            or outcome.error_kind == PollErrorKind.LIMIT
        )
        if heavy:
            self.heavy.add(server_id)
        else:
            self.heavy.discard(server_id)

    def claim(
        self, now: datetime, limit: int, *, lane: Lane | None = None, heavy: Collection[int] = ()
    ) -> list[int]:
        """Take leases on up to `limit` due servers and move each one's next poll an interval on.

        `lane`: only that lane's servers (`heavy` are the servers of `Lane.HEAVY`, whatever their
        last poll did; the other two lanes leave them out), or any due server.
        """
        answering = None if lane is None or lane is Lane.HEAVY else lane is Lane.ANSWERING
        default = self.config.monitor.poll_interval
        with self.store.sessions.begin() as session:
            query = (
                select(Server)
                .where(
                    Server.next_poll_at <= now,
                    or_(Server.lease_expires_at.is_(None), Server.lease_expires_at < now),
                )
                .order_by(Server.next_poll_at)
                .limit(limit)
            )
            proven = and_(Server.consecutive_failures == 0, Server.last_success_at.is_not(None))
            if answering is not None:
                query = query.where(proven if answering else not_(proven))
            # The ids written into the statement: however many servers are heavy, no bound-parameter limit.
            ids: BindParameter[list[int]] = bindparam(
                "heavy", sorted(heavy), expanding=True, literal_execute=True
            )
            if lane is Lane.HEAVY:
                query = query.where(Server.id.in_(ids))
            elif lane is not None and heavy:
                query = query.where(Server.id.not_in(ids))
            if self._postgres:
                query = query.with_for_update(skip_locked=True)
            servers = session.scalars(query).all()
            for server in servers:
                interval = timedelta(seconds=server.interval_seconds or default)
                assert server.next_poll_at is not None
                following = server.next_poll_at + interval
                if following <= now:  # fell behind (downtime): restart the rhythm from now, spread a little
                    following = now + interval * random.uniform(0.9, 1.1)  # noqa: S311
                server.next_poll_at = following
                server.lease_owner = self.owner
                server.lease_expires_at = (
                    now + timedelta(seconds=self.config.monitor.poll_timeout) + LEASE_MARGIN
                )
            claimed = [server.id for server in servers]
        with self._soon_lock:  # a notification from now on asks for another poll, after the gap
            for server_id in claimed:
                self._soon.pop(server_id, None)
                self._started[server_id] = time.monotonic()
        return claimed

    def _api_target(self, server_id: int) -> Target | None:
        with self.store.sessions() as session:
            server = session.get(Server, server_id)
            return None if server is None else api_target(server)

    def poll_soon(self, server_id: int, **marks: datetime) -> bool:
        """Re-poll a server soon (a list-changed notification came), storing `marks` on its row; any thread.

        Notifications are coalesced: while a re-poll is pending, another changes nothing (False, and
        no write), and a re-poll starts no sooner than `list_changed_min_gap` after the server's last
        poll began, so a server that floods notifications is polled at most that often.
        """
        gap = self.config.monitor.list_changed_min_gap
        clock = time.monotonic()
        with self._soon_lock:
            pending = self._soon.get(server_id)
            if pending is not None and clock < pending + self.config.monitor.poll_timeout + gap:
                return False  # a re-poll is already pending (or another instance took it: it expires)
            started = self._started.get(server_id)
            wait = max(0.0, started + gap - clock) if started is not None else 0.0
            self._soon[server_id] = clock + wait
        due = datetime.now(UTC) + timedelta(seconds=wait)
        with self.store.sessions.begin() as session:
            session.execute(
                update(Server)
                .where(Server.id == server_id)
                .values(
                    next_poll_at=case(
                        (or_(Server.next_poll_at.is_(None), Server.next_poll_at > due), due),
                        else_=Server.next_poll_at,
                    ),
                    **marks,
                )
            )
        loop = self.loop
        if loop is not None and wait == 0:
            loop.call_soon_threadsafe(self._tick_now)
        return True

    def _tick_now(self) -> None:
        task = asyncio.get_running_loop().create_task(self.tick())
        self._ticks.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._ticks.discard)

    async def stop(self, grace: float = 10.0) -> None:
        """Stop claiming, let in-flight polls finish for `grace` seconds, abandon the rest, free leases."""
        self._stopping = True
        if self.clock.running:
            self.clock.shutdown(wait=False)
        async with self._tick_lock:  # a claim under way commits its leases before they are freed
            self._arm_slot_timer(None)
        abandoned = []
        tasks = dict(self.in_flight)
        if tasks:
            _, pending = await asyncio.wait(tasks.values(), timeout=grace)
            abandoned = [server_id for server_id, task in tasks.items() if task in pending]
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*pending, return_exceptions=True)
        try:
            await asyncio.to_thread(self._release_leases, abandoned)
        except Exception:
            log.exception("could not free leases (the database is unreachable); they expire on their own")
        clients, self.poller.clients = self.poller.clients, None
        if clients is not None:
            await clients.aclose()

    def _release_leases(self, abandoned: list[int]) -> None:
        """Free this process's leases; abandoned polls become due at once for whoever runs next."""
        with self.store.sessions.begin() as session:
            if abandoned:
                session.execute(
                    update(Server).where(Server.id.in_(abandoned)).values(next_poll_at=datetime.now(UTC))
                )
            session.execute(
                update(Server)
                .where(Server.lease_owner == self.owner)
                .values(lease_owner=None, lease_expires_at=None)
            )
