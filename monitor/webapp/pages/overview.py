"""The overview: every server, worst open alerts first, and the newest changes."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from monitor.core.states import ServerStatus
from monitor.store import queries
from monitor.store.records import SEVERITIES
from monitor.webapp.deps import ReadSession, require_viewer
from monitor.webapp.pages.params import number_param, severity_param
from monitor.webapp.pages.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])


SERVERS_PER_PAGE = 200
"""Servers in one page of the overview's table: ten thousand servers must not make a 5 MB page."""


@router.get("/", response_class=HTMLResponse)
def overview(
    request: Request, session: ReadSession, min_severity: str | None = None, page: str | None = None
) -> HTMLResponse:
    severity = severity_param(min_severity)
    number = number_param(page, "page") or 1
    servers = queries.list_servers(session)
    changes = queries.list_changes(session, min_severity=severity, limit=50)
    states = queries.alert_state_counts(session)
    if severity is not None:
        servers = [s for s in servers if s.worst_open_rank >= severity.rank]
    servers.sort(key=lambda s: (-s.worst_open_rank, s.status != ServerStatus.FAILING, s.name))
    return render(
        request,
        session,
        "overview.html",
        nav="overview",
        servers=servers[(number - 1) * SERVERS_PER_PAGE : number * SERVERS_PER_PAGE],
        server_total=len(servers),
        page=number,
        pages=max(1, -(-len(servers) // SERVERS_PER_PAGE)),
        first_shown=(number - 1) * SERVERS_PER_PAGE + 1,
        changes=changes,
        min_severity=severity.value if severity else "",
        totals={sev: sum(s.open_alerts.get(sev, 0) for s in servers) for sev in SEVERITIES},
        status_counts={status: sum(1 for s in servers if s.status == status) for status in ServerStatus},
        states=states,
    )
