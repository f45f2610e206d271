"""What decisions leave in the database, written off the request path.

A decision asked with a `session_id` registers or heart-beats that host session, so a gateway
asking for decisions shows up among the sessions; a non-allow decision is kept for review. Both are
written by `DecisionRecorder` on a thread of its own, in batches of a few statements each (not a
statement per decision: a burst of a thousand denies is one insert), so answering never waits for a
write, and a clean stop writes what waits (`close`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from monitor.approvals.policy import Verdict
from monitor.approvals.storage import KeptDecision, record_decisions
from monitor.sessions.service import Beat, record_beats
from monitor.store import Store
from monitor.store.access import UnmonitoredServer
from monitor.store.background import BackgroundWriter
from monitor.store.db import insert


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
        """A batch in a few statements whatever its size: the unmonitored names counted, the kept
        decisions inserted at once, the sessions' beats upserted at once. A session that sends no
        fingerprint is recorded as holding the current listing: the monitor has no evidence
        otherwise, and a guess must not raise `session-stale`."""
        record_unmonitored(session, [write for write in writes if isinstance(write, UnmonitoredCall)])
        decided = [write for write in writes if isinstance(write, DecisionWrite)]
        record_decisions(
            session,
            [
                KeptDecision(
                    write.server_id, write.tool, write.verdict, write.session_id, write.client, write.at
                )
                for write in decided
                if write.verdict is not None
            ],
            keep=self.keep,
        )
        record_beats(
            session,
            [
                Beat(write.server_id, write.session_id, write.client, write.holding, write.at)
                for write in decided
                if write.session_id is not None and write.holding is not None
            ],
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
