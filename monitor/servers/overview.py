"""The overview: every server, worst open alerts first, and the newest changes.

The tiles always describe the whole fleet; the severity filter narrows only the tables below them.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse

from monitor.core.states import AlertState, ServerStatus
from monitor.identity.callers import page_read
from monitor.sessions import service as host_sessions
from monitor.store import queries
from monitor.store.records import SEVERITIES
from monitor.web.deps import ReadSession, Web
from monitor.web.params import number_param, severity_param
from monitor.web.refresh import auto_refresh
from monitor.web.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])


SERVERS_PER_PAGE = 200
"""Servers in one page of the overview's table: ten thousand servers must not make a 5 MB page."""


@router.get("/", response_class=HTMLResponse)
def overview(
    request: Request,
    web: Web,
    session: ReadSession,
    min_severity: str | None = None,
    status: str | None = None,
    page: str | None = None,
) -> HTMLResponse:
    severity = severity_param(min_severity)
    if status and status not in tuple(ServerStatus):
        raise HTTPException(422, f"status: expected one of {', '.join(ServerStatus)}")
    number = number_param(page, "page") or 1
    fleet = [web.as_of_now(server) for server in queries.list_servers(session)]
    changes = queries.list_changes(session, min_severity=severity, limit=50)
    alerts = queries.fleet_alert_counts(session)
    servers = [
        s
        for s in fleet
        if (severity is None or s.worst_unresolved_rank >= severity.rank)
        and (not status or s.status == status)
    ]
    servers.sort(key=lambda s: (-s.worst_unresolved_rank, s.status != ServerStatus.FAILING, s.name))
    return render(
        request,
        session,
        "overview.html",
        nav="overview",
        refresh=auto_refresh(request),
        fleet_size=len(fleet),
        skipped=web.config.skipped,
        servers=servers[(number - 1) * SERVERS_PER_PAGE : number * SERVERS_PER_PAGE],
        server_total=len(servers),
        page=number,
        pages=max(1, -(-len(servers) // SERVERS_PER_PAGE)),
        first_shown=(number - 1) * SERVERS_PER_PAGE + 1,
        changes=changes,
        change_alerts=queries.finding_alerts(session, [change.id for change in changes]),
        min_severity=severity.value if severity else "",
        status_filter=status or "",
        totals={sev: alerts[AlertState.OPEN].get(sev, 0) for sev in SEVERITIES},
        acknowledged={sev: alerts[AlertState.ACKNOWLEDGED].get(sev, 0) for sev in SEVERITIES},
        status_counts={status: sum(1 for s in fleet if s.status == status) for status in ServerStatus},
        stale_sessions=host_sessions.count_stale(session, now=web.now(), grace=web.session_grace),
    )
