"""A change made by a caller, in the request's write transaction: its actor, and its audit event.

A handler that changes something takes `Acting`: the caller (the actor of the change, wherever it
is recorded) and the request's write session, in which its audit event is added, so the change and
its record commit together or not at all. Once they commit, the change is logged with its actor.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from monitor.core.roles import Caller
from monitor.core.text import make_visible
from monitor.identity.callers import caller_of
from monitor.identity.storage import record_event
from monitor.notify.outbox import wake_after_commit
from monitor.web.deps import WriteSession

log = logging.getLogger("drift_monitor.audit")


@dataclass
class Act:
    """A change being made by a caller, in the request's write transaction: its actor, and the audit
    event that commits with it."""

    caller: Caller
    session: Session
    at: datetime

    @property
    def actor(self) -> str:
        return self.caller.name

    def record(self, action: str, target: str, **detail: object) -> None:
        record_event(self.session, self.caller, action, target, at=self.at, detail=dict(detail) or None)
        caller = self.caller
        role = caller.role.value if caller.role else "no role"

        def logged() -> None:
            log.info(
                "%s %s by %s (%s, %s) from %s",
                action,
                make_visible(target),
                make_visible(caller.name),
                role,
                caller.via.value,
                caller.source,
                extra={"event": action, "target": target, "actor": caller.name, "source": caller.source},
            )

        wake_after_commit(self.session, logged)


def acting(request: Request, session: WriteSession) -> Act:
    web = request.app.state.web
    return Act(caller_of(request), session, web.now())


Acting = Annotated[Act, Depends(acting)]
