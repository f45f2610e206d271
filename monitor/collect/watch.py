"""Watch sessions: one long-lived session per server that advertises `tools.listChanged`.

They serve two ends. A list-changed notification makes the server due at once, so a change
is seen in seconds rather than a poll interval. And they record what they saw (healthy since
when, the last notification) on the server's row, so when a scheduled poll finds a changed
listing that no notification announced, the poll transaction raises `listing-changed-silently`
(`monitor.core.rules.servers`): long-lived host sessions will not have refreshed either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from datetime import UTC, datetime

from sqlalchemy import select, update

from monitor.collect.client import Limits, PollError, Target, watch_list_changed
from monitor.collect.scheduler import Scheduler
from monitor.store import Store
from monitor.store.models import Server

log = logging.getLogger("drift_monitor.watch")

RESCAN_SECONDS = 2.0
"""How soon a server that starts advertising listChanged gets its watch session (one cheap query)."""
BACKOFF_START, BACKOFF_CAP = 1.0, 60.0


class WatchManager:
    """Keeps a watch session open for each server that advertises listChanged, reconnecting with backoff."""

    def __init__(self, store: Store, scheduler: Scheduler, limits: Limits | None = None) -> None:
        self.store = store
        self.scheduler = scheduler
        self.limits = limits or Limits()
        self.tasks: dict[int, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    watchable = await asyncio.to_thread(self._watchable)
                except Exception:
                    log.exception("listing servers to watch failed; retrying")  # e.g. the database restarts
                    watchable = {}
                for server_id, target in watchable.items():
                    task = self.tasks.get(server_id)
                    if task is None or task.done():
                        self.tasks[server_id] = asyncio.create_task(self._watch(server_id, target, stop))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESCAN_SECONDS)
        finally:
            for task in self.tasks.values():
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    def _watchable(self) -> dict[int, Target]:
        with self.store.sessions() as session:
            ids = session.scalars(select(Server.id).where(Server.list_changed_advertised.is_(True))).all()
        return {
            server_id: self.scheduler.targets[server_id]
            for server_id in ids
            if server_id in self.scheduler.targets
        }

    async def _watch(self, server_id: int, target: Target, stop: asyncio.Event) -> None:
        delay = BACKOFF_START
        while not stop.is_set():
            try:
                await watch_list_changed(
                    target,
                    self.limits,
                    on_ready=lambda: self._mark(server_id, watch_connected_since=datetime.now(UTC)),
                    on_change=lambda: self._notified(server_id),
                    on_ack=lambda honored: self.store.record_listen_ack(
                        server_id, honored, datetime.now(UTC)
                    ),
                )
                delay = BACKOFF_START
            except PollError as exc:
                log.info("watch session to %s ended: %s: %s", target.name, exc.kind, exc.message)
            except Exception:
                log.exception("watch session to %s failed", target.name)
            with contextlib.suppress(Exception):  # the database may be down too; the mark is advisory
                await asyncio.to_thread(self._mark, server_id, watch_connected_since=None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay * random.uniform(0.5, 1.0))  # noqa: S311
            delay = min(delay * 2, BACKOFF_CAP)

    def _notified(self, server_id: int) -> None:
        """One write for the notification and its re-poll; none while a re-poll is already pending."""
        self.scheduler.poll_soon(server_id, last_notification_at=datetime.now(UTC))

    def _mark(self, server_id: int, **values: datetime | None) -> None:
        with self.store.sessions.begin() as session:
            session.execute(update(Server).where(Server.id == server_id).values(**values))
