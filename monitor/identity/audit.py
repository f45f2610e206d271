"""Audit events written off the request path: refused attempts, and actions with no transaction;
and when each token was last used.

A refused request (a wrong token, a role that does not allow it, a forged form) is answered at once;
its audit event is written by a background writer, so a flood of them costs the database batched
inserts, never a write per request, and the answer never waits for a lock. So is an action that
does its database work elsewhere (polling a server now). Changes made in a transaction are recorded
in it instead (`monitor.identity.callers.Act`), so a change and its record commit together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from monitor.core.roles import Caller
from monitor.identity.storage import record_event, record_token_use
from monitor.store.background import BackgroundWriter


@dataclass(frozen=True)
class Event:
    caller: Caller
    action: str
    target: str
    at: datetime
    result: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenUse:
    """A named token was used at `at` (`monitor.identity.known`)."""

    name: str
    at: datetime


class AuditLog(BackgroundWriter[Event | TokenUse]):
    def __init__(self, sessions: sessionmaker[Session], *, max_pending: int = 10_000) -> None:
        super().__init__(sessions, name="audit-log", max_pending=max_pending)

    def token_used(self, name: str, at: datetime) -> None:
        self.submit(TokenUse(name, at))

    def write(self, session: Session, items: list[Event | TokenUse]) -> None:
        for item in items:
            if isinstance(item, TokenUse):
                record_token_use(session, item.name, item.at)
                continue
            record_event(
                session,
                item.caller,
                item.action,
                item.target,
                at=item.at,
                result=item.result,
                detail=item.detail or None,
            )
