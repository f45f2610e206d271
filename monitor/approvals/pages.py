"""Approving and revoking from the dashboard, next to the findings a person is judging.

The server page shows each current tool's decision with its reason and the kept non-allow
decisions; it and the diff page carry the approve forms. The forms are posted like the alert
acknowledgement: a signed-in person, the CSRF token, then back to the page with what was done.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from monitor.approvals import service, storage
from monitor.approvals.api import point_of, refused
from monitor.approvals.errors import ApprovalError
from monitor.store.models import Server
from monitor.store.records import ServerRecord
from monitor.webapp.deps import (
    Web,
    WriteSession,
    page_server_or_404,
    require_editor,
    require_viewer,
    signed_in,
)
from monitor.webapp.pages.csrf import CheckedForm
from monitor.webapp.pages.params import number_param

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])
TheServer = Annotated[ServerRecord, Depends(page_server_or_404)]
DASHBOARD = "dashboard"


def server_approvals(request: Request, session: Session, server: ServerRecord) -> dict[str, Any]:
    """What the server page shows about approvals: each current tool's decision, the history and
    the kept decisions, and whether the person may approve."""
    current = point_of(request).current(server.name)
    row = session.get_one(Server, server.id)
    verdicts = current[1] if current else {}
    return {
        "approval_mode": server.approval,
        "verdicts": verdicts,
        "approval_history": storage.history(session, row)[:50],
        "decisions": storage.recent_decisions(session, server.id),
        "can_approve": signed_in(request.app.state.web, request),
        "done": request.query_params.get("done", ""),
    }


def resolvable_alerts(session: Session, server: ServerRecord, version: int, tools: list[str] | None) -> int:
    """How many open alerts approving these tools (None: all) as in `version` would resolve (said on
    the form)."""
    return len(service.alerts_resolved_by(session, server.id, tools, version))


def _back(server: str, fields: dict[str, str], done: str) -> Response:
    page = fields.get("back", "server")
    target = f"/servers/{quote(server, safe='')}"
    if page == "diff":
        target += f"/diff?from={fields.get('from', '')}&to={fields.get('version', '')}"
        return RedirectResponse(f"{target}&done={quote(done)}", status_code=303)
    return RedirectResponse(f"{target}?done={quote(done)}#approvals", status_code=303)


@router.post("/servers/{name}/approve", response_class=HTMLResponse)
def approve(
    request: Request,
    web: Web,
    fields: CheckedForm,
    _editor: Annotated[None, Depends(require_editor)],
    server: TheServer,
    session: WriteSession,
) -> Response:
    version = number_param(fields.get("version"), "version")
    tool = request.query_params.get("tool") or None
    wanted = service.ApprovalRequest(
        server.name,
        version,
        [tool] if tool else None,
        fields.get("note", "")[:4000],
        resolve_alerts=fields.get("resolve_alerts") == "on",
    )
    try:
        done = service.approve(session, wanted, actor=DASHBOARD, now=web.now(), policy=web.alerting)
    except ApprovalError as exc:
        raise refused(exc) from None
    what = f"{tool!r}" if tool else f"{len(done.approvals)} tools"
    resolved = f", resolved {len(done.resolved_alerts)} alert(s)" if done.resolved_alerts else ""
    return _back(server.name, fields, f"approved {what} as in v{done.version}{resolved}")


@router.post("/servers/{name}/revoke", response_class=HTMLResponse)
def revoke(
    request: Request,
    web: Web,
    fields: CheckedForm,
    _editor: Annotated[None, Depends(require_editor)],
    server: TheServer,
    session: WriteSession,
) -> Response:
    tool = request.query_params.get("tool", "")
    if not tool:
        raise HTTPException(422, "tool: which tool's approval to revoke")
    try:
        service.revoke(
            session, server.name, tool, note=fields.get("note", "")[:4000], actor=DASHBOARD, now=web.now()
        )
    except ApprovalError as exc:
        raise refused(exc) from None
    return _back(server.name, fields, f"revoked the approval of {tool!r}")
