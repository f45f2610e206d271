"""The host sessions page: which sessions still act on an outdated listing, how far behind each is,
and what it missed, worst first."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from monitor.core.findings import Finding
from monitor.identity.callers import page_read
from monitor.sessions import service as host_sessions
from monitor.store import queries
from monitor.store.records import SessionRecord, SnapshotRecord
from monitor.web.deps import ReadSession, Web
from monitor.web.params import number_param
from monitor.web.refresh import auto_refresh
from monitor.web.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
SESSIONS_PER_PAGE = 50
MISSED_SHOWN = 5
"""Changes listed per session; the rest are counted, and the diff link shows them all."""


class MissedCache:
    """What a holder of one listing misses against another, by (held fingerprint, current listing).

    Both sides are content-addressed, so an answer never goes stale; the diff engine costs tens of
    milliseconds per pair, and an auto-refreshing page asks for the same pairs every minute."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._answers: OrderedDict[tuple[str, int], list[Finding]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: Session, held: str, current_listing_id: int) -> list[Finding]:
        key = (held, current_listing_id)
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        found = host_sessions.missed_changes(session, held, current_listing_id) or []
        answer = sorted(found, key=lambda f: (-f.severity.rank, f.tool or "", f.rule))
        with self._lock:
            self._answers[key] = answer
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)
        return answer


MISSED = MissedCache(size=2048)


@dataclass(frozen=True)
class SessionView:
    """A session as a person triages it: the version it holds, how far behind, what it missed."""

    record: SessionRecord
    held: int | None
    """The server version whose listing the session holds; None for a listing never seen."""
    current: int | None
    missed: list[Finding]
    """What a host acting on the held listing misses, worst first (empty when current)."""
    alerts: list[tuple[int, str, str]]
    """Its unresolved alerts: (id, rule, severity), worst first."""

    @property
    def behind(self) -> int | None:
        if self.held is None or self.current is None:
            return None
        return max(0, self.current - self.held)


def session_views(session: Session, records: list[SessionRecord]) -> list[SessionView]:
    """A statement or two for the page's sessions, and the diff engine once per new listing pair."""
    currents: dict[str, SnapshotRecord] = queries.current_by_name(session)
    held = queries.versions_of(session, [(r.server, r.fingerprint) for r in records])
    alerts = queries.session_alerts(session)
    views = []
    for record in records:
        current = currents.get(record.server)
        version = held.get((record.server, record.fingerprint))
        missed: list[Finding] = []
        if current is not None and record.fingerprint != current.fingerprint:
            missed = MISSED.get(session, record.fingerprint, current.listing_id)
        views.append(
            SessionView(
                record,
                version,
                current.version if current else None,
                missed,
                alerts.get((record.server, record.session_id), []),
            )
        )
    return views


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(
    request: Request, web: Web, session: ReadSession, stale: str | None = None, page: str | None = None
) -> HTMLResponse:
    stale_only = stale in ("1", "true", "on")
    number = number_param(page, "page") or 1
    records = host_sessions.list_sessions(
        session, stale_only=stale_only, now=web.now(), grace=web.session_grace
    )
    start = (number - 1) * SESSIONS_PER_PAGE
    shown = records[start : start + SESSIONS_PER_PAGE]
    return render(
        request,
        session,
        "sessions.html",
        nav="sessions",
        refresh=auto_refresh(request),
        sessions=session_views(session, shown),
        total=len(records),
        first=start + 1,
        page=number,
        next_page=number + 1 if start + SESSIONS_PER_PAGE < len(records) else None,
        stale_only=stale_only,
        missed_shown=MISSED_SHOWN,
        unmonitored=queries.unmonitored_servers(session),
    )
