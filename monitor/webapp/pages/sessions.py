"""The host sessions page: which sessions still act on an outdated listing, how far behind each is,
and what it missed, worst first."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from monitor.core.findings import Finding
from monitor.notify import sessions as host_sessions
from monitor.store import queries
from monitor.store.records import SessionRecord, SnapshotRecord
from monitor.webapp.deps import ReadSession, Web, require_viewer
from monitor.webapp.pages.refresh import auto_refresh
from monitor.webapp.pages.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])
MISSED_SHOWN = 5
"""Changes listed per session; the rest are counted, and the diff link shows them all."""


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
    currents: dict[str, SnapshotRecord | None] = {s.name: s.current for s in queries.list_servers(session)}
    held_by_server: dict[str, set[str]] = defaultdict(set)
    for record in records:
        held_by_server[record.server].add(record.fingerprint)
    held = {
        server: queries.versions_of(session, server, fingerprints)
        for server, fingerprints in held_by_server.items()
    }
    alerts = queries.session_alerts(session)
    missed_cache: dict[tuple[str, int], list[Finding]] = {}
    views = []
    for record in records:
        current = currents.get(record.server)
        version = held[record.server].get(record.fingerprint)
        missed: list[Finding] = []
        if current is not None and record.fingerprint != current.fingerprint:
            key = (record.fingerprint, current.listing_id)
            if key not in missed_cache:
                found = host_sessions.missed_changes(session, record.fingerprint, current.listing_id) or []
                missed_cache[key] = sorted(found, key=lambda f: (-f.severity.rank, f.tool or "", f.rule))
            missed = missed_cache[key]
        views.append(
            SessionView(
                record,
                version.version if version else None,
                current.version if current else None,
                missed,
                alerts.get((record.server, record.session_id), []),
            )
        )
    return views


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(request: Request, web: Web, session: ReadSession, stale: str | None = None) -> HTMLResponse:
    stale_only = stale in ("1", "true", "on")
    records = host_sessions.list_sessions(
        session, stale_only=stale_only, now=web.now(), grace=web.session_grace
    )
    return render(
        request,
        session,
        "sessions.html",
        nav="sessions",
        refresh=auto_refresh(request),
        sessions=session_views(session, records),
        stale_only=stale_only,
        missed_shown=MISSED_SHOWN,
    )
