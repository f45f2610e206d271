"""The host sessions page: which sessions still act on an outdated listing."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from monitor.notify import sessions as host_sessions
from monitor.webapp.deps import ReadSession, Web, require_viewer
from monitor.webapp.pages.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(request: Request, web: Web, session: ReadSession, stale: str | None = None) -> HTMLResponse:
    stale_only = stale in ("1", "true", "on")
    records = host_sessions.list_sessions(
        session, stale_only=stale_only, now=web.now(), grace=web.session_grace
    )
    return render(request, session, "sessions.html", nav="sessions", sessions=records, stale_only=stale_only)
