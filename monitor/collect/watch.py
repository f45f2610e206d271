"""Watch sessions: one long-lived session per server that advertises `tools.listChanged`.

They serve two ends. A list-changed notification makes the server due at once, so a change
is seen in seconds rather than a poll interval. And when a scheduled poll finds a changed
listing that no notification announced, long-lived host sessions will not have refreshed
either: that is `listing-changed-silently`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from monitor.collect.client import Limits, PollError, Target, watch_list_changed
from monitor.collect.scheduler import Scheduler
from monitor.core.rules import CATALOG
from monitor.notify import alerts
from monitor.store import Store
from monitor.store.models import FindingRecord, Server, Snapshot

log = logging.getLogger("drift_monitor.watch")

RESCAN_SECONDS = 2.0
"""How soon a server that starts advertising listChanged gets its watch session (one cheap query)."""
BACKOFF_START, BACKOFF_CAP = 1.0, 60.0


class SilentChangeCheck:
    """Poll hook: a new version that no notification announced on a healthy watch session."""

    def __init__(self, alerting: alerts.Alerting) -> None:
        self.alerting = alerting

    def after_poll(
        self,
        session: Session,
        server: Server,
        findings: Sequence[FindingRecord],
        *,
        snapshot: Snapshot | None,
        new_version: bool,
        now: datetime,
    ) -> None:
        if snapshot is None or not new_version or snapshot.version == 1:
            return
        previous = session.scalar(
            select(Snapshot).where(Snapshot.server_id == server.id, Snapshot.version == snapshot.version - 1)
        )
        watching = server.watch_connected_since
        if previous is None or watching is None or watching > previous.last_seen:
            return  # no healthy watch session covered the whole gap: silence proves nothing
        notified = (
            server.last_notification_at is not None and server.last_notification_at >= previous.last_seen
        )
        if notified:
            alerts.resolve_matching(
                session, server.id, "listing-changed-silently", now=now, policy=self.alerting
            )
            return
        rule = CATALOG["listing-changed-silently"]
        message = (
            f"{server.name} changed its listing (version {snapshot.version}) without sending "
            "notifications/tools/list_changed on the monitor's watch session: hosts holding long-lived "
            "sessions will keep acting on the old listing."
        )
        record = FindingRecord(
            server_id=server.id,
            from_snapshot_id=previous.id,
            to_snapshot_id=snapshot.id,
            detected_at=now,
            rule=rule.id,
            severity=rule.severity.value,
            severity_rank=rule.severity.rank,
            tool=None,
            field=None,
            old=None,
            new=None,
            message=message,
            detail={
                "list_changed_advertised": server.list_changed_advertised,
                "watching_since": watching.isoformat(),
            },
        )
        session.add(record)
        session.flush()
        alerts.open_or_attach(
            session,
            server,
            rule=rule.id,
            severity=rule.severity,
            message=message,
            findings=[record],
            now=now,
            policy=self.alerting,
        )


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
        self._mark(server_id, last_notification_at=datetime.now(UTC))
        self.scheduler.poll_soon(server_id)

    def _mark(self, server_id: int, **values: datetime | None) -> None:
        with self.store.sessions.begin() as session:
            session.execute(update(Server).where(Server.id == server_id).values(**values))
