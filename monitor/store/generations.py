"""The counters decision caches follow, moved inside the transactions that change what they cache.

A process answers decisions from a cache (`monitor.approvals.cache`) and must see every change that
another process, or `drift-monitor poll`, commits. Comparing the highest ids of tables is not
enough: PostgreSQL hands ids out at insert, not at commit, so a change can commit after a larger id
was already seen. A counter moved in the changing transaction becomes visible exactly when that
transaction commits, and a cache that compares it never misses a change, whatever the order of ids.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from monitor.store.models import DecisionNames, Server


def decisions_changed(server: Server) -> None:
    """What decisions about the server's tools rest on changed in this transaction (a new version,
    an approval, a revocation, a mode): every cache rebuilds the server's view at its next decision."""
    server.decision_generation = Server.decision_generation + 1


def names_changed(session: Session) -> None:
    """A server was registered or deleted, or its aliases changed, in this transaction: every cache
    reads the names again at its next decision."""
    session.execute(
        update(DecisionNames).where(DecisionNames.id == 1).values(generation=DecisionNames.generation + 1)
    )


def tokens_changed(session: Session) -> None:
    """A named token was created or revoked in this transaction: every process reads the tokens it
    keeps again at its next request that carries one."""
    session.execute(
        update(DecisionNames)
        .where(DecisionNames.id == 1)
        .values(tokens_generation=DecisionNames.tokens_generation + 1)
    )
