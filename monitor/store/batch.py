"""Group commit: many unchanged polls recorded in one transaction.

Most polls see the listing their server's current version already holds. Recording each in its
own transaction costs a commit (and on PostgreSQL an fsync) per poll, which caps one instance at a
few dozen polls a second however fast it fetches. A batch locks its servers, reads their current
versions in one query, and records every poll that saw its server's current listing together; a
poll that saw a different listing is left to `Store.record`, in its own transaction, so a new
version with its findings and alerts never waits for, or fails with, anyone else's poll.

The crash guarantee is the single poll's: a poll is recorded once its batch commits; until then
its server's lease stands, so after a crash the server is polled again at its next slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, bindparam, select
from sqlalchemy.orm import Session

from monitor.store.marks import write_marks
from monitor.store.models import Listing, Server, Snapshot, newest_version
from monitor.store.polled import PollOutcome, SuccessfulPoll, extras_changed
from monitor.store.polls import Store

CHUNK = 500
"""Servers per `IN (...)` list."""


def record_unchanged(store: Store, polls: Sequence[SuccessfulPoll]) -> list[PollOutcome | None]:
    """Record, in one transaction, every poll in `polls` that saw its server's current listing.

    Returns an outcome per poll, in order; None for a poll that was not recorded (its listing
    changed, it is not `compact`, or its server has no version yet or is gone): record those with
    `Store.record`.
    """
    if not polls:
        return []
    with store.sessions.begin() as session:
        ids = sorted({poll.server_id for poll in polls})
        servers, current = _lock_and_read(session, ids)
        outcomes: list[PollOutcome | None] = []
        marks: list[dict[str, Any]] = []
        for poll in polls:
            server = servers.get(poll.server_id)
            version = current.get(poll.server_id)
            unchanged = version is not None and version[1] == poll.listing.fingerprint
            if server is None or version is None or not unchanged or not poll.compact:
                outcomes.append(None)
                continue
            if extras_changed(version[0], poll):  # recorded on its own: `meta-changed`, instructions
                outcomes.append(None)
                continue
            outcome, row = store.record_unchanged(session, server, version[0], poll)
            outcomes.append(outcome)
            marks.append(row)
        session.flush()
        write_marks(session, _last_per_slot(marks))
    return outcomes


def _current_versions(locking: bool) -> Select[Server, Snapshot, str]:
    """Each server of the `ids` list (locked when `locking`, in id order so batches never deadlock),
    with its newest version and that version's listing fingerprint (None before a first version)."""
    query = (
        select(Server, Snapshot, Listing.fingerprint)
        .select_from(Server)
        .outerjoin(
            Snapshot, (Snapshot.server_id == Server.id) & (Snapshot.version == newest_version(Server.id))
        )
        .outerjoin(Listing, Snapshot.listing_id == Listing.id)
        .where(Server.id.in_(bindparam("ids", expanding=True)))
        .order_by(Server.id)
    )
    return query.with_for_update(of=Server) if locking else query


_READ = _current_versions(locking=False)
_LOCK_AND_READ = _current_versions(locking=True)
"""Built once: a batch pays one statement for its servers and versions, and no statement building."""


def _lock_and_read(
    session: Session, ids: list[int]
) -> tuple[dict[int, Server], dict[int, tuple[Snapshot, str]]]:
    """The servers (locked on PostgreSQL) and each one's newest version with its listing's fingerprint."""
    query = _LOCK_AND_READ if session.get_bind().dialect.name == "postgresql" else _READ
    servers: dict[int, Server] = {}
    current: dict[int, tuple[Snapshot, str]] = {}
    for start in range(0, len(ids), CHUNK):
        for server, snapshot, fingerprint in session.execute(query, {"ids": ids[start : start + CHUNK]}):
            servers[server.id] = server
            if snapshot is not None and fingerprint is not None:
                current[server.id] = (snapshot, fingerprint)
    return servers, current


def _last_per_slot(marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (server, slot), the latest: an upsert statement may not touch a row twice."""
    return list({(row["server_id"], row["slot"]): row for row in marks}.values())
