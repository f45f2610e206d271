"""What decisions leave in the database, written off the request path.

A decision asked with a `session_id` registers or heart-beats that host session, so a gateway
asking for decisions shows up among the sessions; a non-allow decision is kept for review. Both are
written by `DecisionRecorder` on a thread of its own, in batches, so answering never waits for a
write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.approvals.policy import Verdict
from monitor.approvals.storage import record_decision
from monitor.sessions import service as host_sessions
from monitor.store import Store
from monitor.store.access import UnmonitoredServer
from monitor.store.background import BackgroundWriter
from monitor.store.db import insert
from monitor.store.models import HostSession, Server


class SessionBeats:
    """Records host sessions seen through decisions, writing at most once per `interval` per session
    (or when its reported listing changes), so a busy gateway does not turn each decision into a write."""

    def __init__(self, interval: float = 30.0) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[float, str]] = {}

    def due(self, server: str, session_id: str, fingerprint: str) -> bool:
        key = (server, session_id)
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and last[1] == fingerprint and now - last[0] < self.interval:
                return False
            if len(self._seen) > 100_000:
                self._seen.clear()
            self._seen[key] = (now, fingerprint)
            return True


def beat(
    session: Session,
    *,
    server: str,
    session_id: str,
    client: str | None,
    fingerprint: str,
    now: datetime,
) -> None:
    """Register the host session, or heart-beat it with the fingerprint of the listing it holds.

    A caller that sends no fingerprint is recorded as holding the current listing: the monitor has
    no evidence otherwise, and a guess must not raise `session-stale`.
    """
    existing = session.scalar(
        select(HostSession.id)
        .join(Server, Server.id == HostSession.server_id)
        .where(Server.name == server, HostSession.session_id == session_id)
    )
    if existing is None:
        host_sessions.register_session(
            session,
            server=server,
            session_id=session_id,
            client=client,
            connected_at=now,
            fingerprint=fingerprint,
            tools=None,
            now=now,
        )
    else:
        host_sessions.heartbeat(
            session, server=server, session_id=session_id, fingerprint=fingerprint, tools=None, now=now
        )


@dataclass(frozen=True)
class UnmonitoredCall:
    """A host asked about a server name no monitored server has (or had a moment ago)."""

    name: str
    host: str
    at: datetime


@dataclass(frozen=True)
class DecisionWrite:
    """What one decision leaves in the database: the decision itself when it was not an allow, and
    the host session's heart-beat when one is due."""

    server_id: int
    server: str
    tool: str
    verdict: Verdict | None
    session_id: str | None
    client: str | None
    holding: str | None
    """The fingerprint the session holds, for a due heart-beat; None: no beat."""
    at: datetime


class DecisionRecorder(BackgroundWriter[DecisionWrite | UnmonitoredCall]):
    """Writes decisions' traces (kept decisions, session beats, unmonitored names) off the request
    path, in batches, so that answering never waits for the database's write lock (which a poll may
    hold on SQLite)."""

    def __init__(self, store: Store, *, keep: int, max_pending: int = 10_000) -> None:
        super().__init__(store.sessions, name="decision-recorder", max_pending=max_pending)
        self.keep = keep

    def write(self, session: Session, writes: list[DecisionWrite | UnmonitoredCall]) -> None:
        unmonitored = [write for write in writes if isinstance(write, UnmonitoredCall)]
        if unmonitored:
            record_unmonitored(session, unmonitored)
        for write in writes:
            if isinstance(write, UnmonitoredCall):
                continue
            if write.verdict is not None:
                record_decision(
                    session,
                    server_id=write.server_id,
                    tool=write.tool,
                    verdict=write.verdict,
                    session_id=write.session_id,
                    client=write.client,
                    now=write.at,
                    keep=self.keep,
                )
            if write.session_id is not None and write.holding is not None:
                beat(
                    session,
                    server=write.server,
                    session_id=write.session_id,
                    client=write.client,
                    fingerprint=write.holding,
                    now=write.at,
                )


def record_unmonitored(session: Session, calls: Sequence[UnmonitoredCall]) -> None:
    """Count the calls per (name, host), adding a name the first time it is seen."""
    counted: dict[tuple[str, str], list[UnmonitoredCall]] = {}
    for call in calls:
        counted.setdefault((call.name[:200], call.host), []).append(call)
    for (name, host), same in sorted(counted.items()):
        first, last = min(c.at for c in same), max(c.at for c in same)
        statement = insert(session)(UnmonitoredServer).values(
            name=name, host=host, first_seen=first, last_seen=last, calls=len(same)
        )
        session.execute(
            statement.on_conflict_do_update(
                index_elements=["name", "host"],
                set_={
                    "last_seen": statement.excluded.last_seen,
                    "calls": UnmonitoredServer.calls + statement.excluded.calls,
                },
            )
        )
