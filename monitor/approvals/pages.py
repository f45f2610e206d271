"""Approving and revoking from the dashboard, next to the findings a person is judging.

The server page shows each current tool's decision with its reason and the kept non-allow
decisions; it, the diff page and the alert page carry the approve forms. Approving asks first: the
form leads to a page (`GET /servers/{name}/approve?tool=...&version=...`, an address that can be
copied or bookmarked) that says what will be approved, in which version, and which open alerts it
will resolve, and only its "Approve" button approves, as the signed-in approver (the actor of the
events, the resolutions and their audit entry). Then the person is back where they came from (the
alert's page, the diff, the server's approvals), where a banner says what was approved, by whom.
Revoking is one click: it only ever makes decisions stricter.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from monitor.approvals import service, storage
from monitor.approvals.api import point_of, refused
from monitor.approvals.errors import ApprovalError
from monitor.core.roles import Permission
from monitor.identity.callers import caller_of, page_approve, page_read
from monitor.store.models import Server
from monitor.store.records import ServerRecord
from monitor.web.acts import Acting
from monitor.web.csrf import CheckedForm
from monitor.web.deps import ReadSession, Web, page_server_or_404
from monitor.web.params import number_param
from monitor.web.rendering import redirect_with, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
TheServer = Annotated[ServerRecord, Depends(page_server_or_404)]


def server_approvals(request: Request, session: Session, server: ServerRecord) -> dict[str, Any]:
    """What the server page shows about approvals: each current tool's decision, the history and
    the kept decisions, whether the person may approve, and how many open alerts approving every
    tool would resolve (the form offers to resolve them only when there are some)."""
    current = point_of(request).current(server.name, session)
    row = session.get_one(Server, server.id)
    verdicts = current[1] if current else {}
    version = server.current.version if server.current else None
    return {
        "approval_mode": server.approval,
        "verdicts": verdicts,
        "approval_history": storage.history(session, row)[:50],
        "decisions": storage.recent_decisions(session, server.id),
        "can_approve": caller_of(request).may(Permission.APPROVE),
        "resolvable": resolvable_alerts(session, server, version, None) if version is not None else 0,
    }


def resolvable_alerts(session: Session, server: ServerRecord, version: int, tools: list[str] | None) -> int:
    """How many open alerts approving these tools (None: all) as in `version` would resolve (said on
    the form)."""
    return len(service.alerts_resolved_by(session, server.id, tools, version))


def _back(server: str, fields: dict[str, str]) -> str:
    """Where the person came from, and goes back to (the confirmation's Cancel, and after
    approving): the alert's page, the diff or the server's approvals."""
    target = f"/servers/{quote(server, safe='')}"
    back = fields.get("back", "server")
    alert = number_param(fields.get("alert"), "alert") if back == "alert" else None
    if alert is not None:
        return f"/alerts/{alert}"
    if back == "diff":
        return f"{target}/diff?from={quote(fields.get('from', ''))}&to={quote(fields.get('version', ''))}"
    return f"{target}#approvals"


CARRIED = ("version", "note", "resolve_alerts", "back", "from", "alert")
"""What an approve form sends that its confirmation carries on to its own form."""


def _address(server: str, tool: str | None, query: dict[str, str] | None = None) -> str:
    """The approve address of `tool` (None: every tool) of `server`, with `query` after the tool."""
    pairs = ([("tool", tool)] if tool else []) + list((query or {}).items())
    return f"/servers/{quote(server, safe='')}/approve" + (f"?{urlencode(pairs)}" if pairs else "")


@router.get("/servers/{name}/approve", response_class=HTMLResponse)
def confirmation(
    request: Request,
    _approver: Annotated[None, Depends(page_approve)],
    server: TheServer,
    session: ReadSession,
) -> HTMLResponse:
    """What approving will do, asked before it is done: the tool (`tool`, else every tool), in which
    version (`version`, else the current one), the open alerts it resolves (unless
    `resolve_alerts=off`) and under whose name. Every approve form leads here, so the address can be
    copied, bookmarked or reloaded. It changes nothing: only its button approves, a form bound to
    the visitor's session. A version or tool that does not exist is a 404 page saying which."""
    params = request.query_params
    tool = params.get("tool") or None
    tools = [tool] if tool else None
    fields = {key: params[key] for key in CARRIED if params.get(key)}
    try:
        shown = storage.approvable(session, server.id, number_param(fields.get("version"), "version"), tools)
    except ApprovalError as exc:
        raise refused(exc) from None
    resolves = fields.get("resolve_alerts", "on") == "on"
    fields.update(version=str(shown), resolve_alerts="on" if resolves else "off")
    return render(
        request,
        session,
        "approve_confirm.html",
        nav="",
        server=server,
        version=shown,
        tool=tool,
        fields=fields,
        resolving=service.alerts_resolved_by(session, server.id, tools, shown) if resolves else [],
        back=_back(server.name, fields),
        action=_address(server.name, tool),
    )


@router.post("/servers/{name}/approve", response_class=HTMLResponse)
def approve(
    request: Request,
    web: Web,
    fields: CheckedForm,
    _approver: Annotated[None, Depends(page_approve)],
    server: TheServer,
    act: Acting,
) -> Response:
    """An approve form's post leads to its confirmation, at an address of its own; the confirmation's
    post (`confirm=yes`) approves."""
    version = number_param(fields.get("version"), "version")
    tool = request.query_params.get("tool") or None
    tools = [tool] if tool else None
    wanted = service.ApprovalRequest(
        server.name,
        version,
        tools,
        fields.get("note", "")[:4000],
        resolve_alerts=fields.get("resolve_alerts") == "on",
    )
    if fields.get("confirm") != "yes":
        carried = {key: fields[key] for key in CARRIED if fields.get(key)}
        carried["resolve_alerts"] = "on" if wanted.resolve_alerts else "off"
        return RedirectResponse(_address(server.name, tool, carried), status_code=303)
    try:
        done = service.approve(act.session, wanted, actor=act.actor, now=act.at, policy=web.alerting)
    except ApprovalError as exc:
        raise refused(exc) from None
    names = sorted({a.tool for a in done.approvals if a.tool})
    act.record(
        "approval.approve",
        server.name,
        version=done.version,
        tools=names,
        resolved_alerts=done.resolved_alerts,
        note=wanted.note,
    )
    what = f"{tool!r}" if tool else f"{len(names)} tools"
    resolved = (
        f", resolving alert(s) {', '.join(f'#{n}' for n in done.resolved_alerts)}"
        if done.resolved_alerts
        else ""
    )
    message = f"{act.actor} approved {what} of {server.name} as in v{done.version}{resolved}."
    return redirect_with(request, _back(server.name, fields), message)


@router.post("/servers/{name}/revoke", response_class=HTMLResponse)
def revoke(
    request: Request,
    fields: CheckedForm,
    _approver: Annotated[None, Depends(page_approve)],
    server: TheServer,
    act: Acting,
) -> Response:
    tool = request.query_params.get("tool", "")
    if not tool:
        raise HTTPException(422, "tool: which tool's approval to revoke")
    note = fields.get("note", "")[:4000]
    try:
        service.revoke(act.session, server.name, tool, note=note, actor=act.actor, now=act.at)
    except ApprovalError as exc:
        raise refused(exc) from None
    act.record("approval.revoke", server.name, tool=tool, note=note)
    message = (
        f"{act.actor} revoked the approval of {tool!r}: decisions about it deny until it is approved again."
    )
    return redirect_with(request, _back(server.name, fields), message)
