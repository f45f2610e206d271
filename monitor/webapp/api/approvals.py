"""/api/v1/servers/{name}/approvals: approve a version's tools, revoke, the history; the approval mode."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from monitor.core.states import ApprovalMode, ServerOrigin
from monitor.core.text import make_visible
from monitor.notify import approvals as approving
from monitor.store import approvals
from monitor.store.models import Server
from monitor.store.records import ApprovalRecord, ServerRecord
from monitor.webapp.api.schemas import (
    ERRORS,
    INT32_MAX,
    NO_NUL,
    WRITE_ERRORS,
    ApiJSONResponse,
    ErrorOut,
    not_found,
    unprocessable,
)
from monitor.webapp.deps import (
    ReadSession,
    ServerName,
    Web,
    WriteSession,
    db_safe,
    find_server_or_404,
    require_read,
    require_write,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["approvals"],
    dependencies=[Depends(require_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
ToolName = Annotated[str, Path(max_length=1000, pattern=NO_NUL, description="The tool's name (URL-encoded)")]
Note = Annotated[str, Field(max_length=4000, pattern=NO_NUL, description="Why: kept with the approval")]
Actor = Annotated[
    str | None,
    Field(default=None, max_length=200, pattern=NO_NUL, description="Who, for the record (default: api)"),
]


class ApprovalIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="The version to approve (default: the current one)"
    )
    tools: list[Annotated[str, Field(min_length=1, max_length=1000, pattern=NO_NUL)]] | None = Field(
        default=None, max_length=100_000, description="The tools to approve (default: all of that version)"
    )
    note: Note = ""
    by: Actor = None
    resolve_alerts: bool = Field(
        default=True,
        description="Resolve the open alerts that the changes up to this version raised about these tools",
    )


class ApprovedOut(BaseModel):
    version: int
    approvals: list[ApprovalRecord]
    resolved_alerts: list[int] = Field(description="Ids of the alerts this approval resolved")


class ModeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["tofu", "review", "off"]
    note: Note = ""
    by: Actor = None


def _server_row(session: Session, name: str) -> Server:
    record = find_server_or_404(session, name)
    return session.get_one(Server, record.id, with_for_update=True)


def _check_text(values: list[str], field: str) -> None:
    for value in values:
        if not db_safe(value):
            raise unprocessable(["body", field], "must not contain NUL characters or lone surrogates")


@router.get(
    "/servers/{name}/approvals", summary="The approval history, newest first", responses=not_found("server")
)
def list_approvals(
    name: ServerName,
    session: ReadSession,
    tool: Annotated[str | None, Query(max_length=1000, pattern=NO_NUL, description="Only this tool")] = None,
) -> list[ApprovalRecord]:
    record = find_server_or_404(session, name)
    if tool is not None and not db_safe(tool):
        return []
    return approvals.history(session, session.get_one(Server, record.id), tool)


@router.post(
    "/servers/{name}/approvals",
    status_code=201,
    summary="Approve the tools' definitions as they are in a version",
    dependencies=[Depends(require_write)],
    responses={
        **WRITE_ERRORS,
        **not_found("server, version or tool"),
        409: {"model": ErrorOut, "description": "The server has not been polled yet"},
    },
)
def approve(name: ServerName, body: ApprovalIn, web: Web, session: WriteSession) -> ApprovedOut:
    _check_text([*(body.tools or []), body.note, body.by or ""], "tools")
    server = _server_row(session, name)
    try:
        done = approving.approve(
            session,
            server,
            version=body.version,
            tools=body.tools,
            note=body.note,
            actor=body.by or "api",
            now=web.now(),
            resolve_alerts=body.resolve_alerts,
            policy=web.alerting,
        )
    except approvals.NotFound as exc:
        raise HTTPException(404, make_visible(str(exc))) from None
    except approvals.ApprovalError as exc:
        raise HTTPException(409, make_visible(str(exc))) from None
    names = {event.tool for event in done.events}
    history = [r for r in approvals.history(session, server) if r.id is not None and r.tool in names]
    return ApprovedOut(
        version=done.version,
        approvals=[r for r in history if r.id in {event.id for event in done.events}],
        resolved_alerts=done.resolved_alerts,
    )


@router.delete(
    "/servers/{name}/approvals/{tool:path}",
    summary="Revoke a tool's approval: it is asked about until approved again",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **not_found("server or approval")},
)
def revoke(
    name: ServerName,
    tool: ToolName,
    web: Web,
    session: WriteSession,
    note: Annotated[str, Query(max_length=4000, pattern=NO_NUL)] = "",
    by: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
) -> ApprovalRecord:
    server = _server_row(session, name)
    if not db_safe(tool) or not db_safe(note) or not db_safe(by or ""):
        raise HTTPException(404, f"{make_visible(tool)!r} is not approved")
    try:
        event = approvals.revoke(session, server, tool, note=note, actor=by or "api", now=web.now())
    except approvals.ApprovalError as exc:
        raise HTTPException(404, make_visible(str(exc))) from None
    return next(r for r in approvals.history(session, server, tool) if r.id == event.id)


@router.put(
    "/servers/{name}/approval",
    summary="Set the server's approval mode (tofu, review or off)",
    dependencies=[Depends(require_write)],
    responses={
        **WRITE_ERRORS,
        **not_found("server"),
        409: {"model": ErrorOut, "description": "The server comes from a config file: set `approval` there"},
    },
)
def set_mode(name: ServerName, body: ModeIn, web: Web, session: WriteSession) -> ServerRecord:
    _check_text([body.note, body.by or ""], "note")
    server = _server_row(session, name)
    if server.origin == ServerOrigin.CONFIG and server.approval != body.mode:
        raise HTTPException(
            409, f"server {name!r} comes from a config file: set approval = {body.mode!r} there"
        )
    approvals.set_mode(
        session, server, ApprovalMode(body.mode), actor=body.by or "api", note=body.note, now=web.now()
    )
    return find_server_or_404(session, name)
