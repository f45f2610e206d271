"""Approvals and decisions over the JSON API (docs/contract.md section 10).

`/api/v1/servers/{name}/approvals` approves a version's tools, revokes, and lists the history;
`/api/v1/servers/{name}/approval` sets the mode; `POST /api/v1/decisions` is the general form of a
decision, and `/api/v1/servers/{name}/annotations/enforced` the enforced annotations of every tool.
Changes go through `monitor.approvals.service`, and its errors become the same status codes here
and on the dashboard (`http_status`). A decision may read the database, so it runs off the
event loop: on the decision lane's threads (`monitor.approvals.lane`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import HTTPConnection

from monitor.approvals import service, storage
from monitor.approvals.errors import ApprovalError, Conflict, NotFound
from monitor.approvals.lane import DecisionLane
from monitor.approvals.point import DecisionPoint
from monitor.approvals.records import ApprovalRecord
from monitor.core.ijson import storable
from monitor.core.roles import Permission
from monitor.core.states import ApprovalMode
from monitor.core.text import make_visible
from monitor.identity.callers import may_approve, may_decide, may_read, require
from monitor.store.models import Server
from monitor.store.records import ServerRecord
from monitor.web.acts import Acting
from monitor.web.deps import ReadSession, ServerName, Web, find_server_or_404
from monitor.web.schemas import (
    ERRORS,
    FINGERPRINT,
    INT32_MAX,
    NO_NUL,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    ErrorOut,
    ShortStoredText,
    StoredText,
    ToolNameText,
    not_found,
)

read_or_decide = require(Permission.READ, Permission.DECIDE)
"""Gateways read the enforced annotations with a decide token; people with a viewer one."""
router = APIRouter(
    prefix="/api/v1",
    tags=["approvals"],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)


def point_of(connection: HTTPConnection) -> DecisionPoint:
    """The app's decision point (`create_app` keeps one on `app.state`)."""
    point: DecisionPoint = connection.app.state.decision_point
    return point


async def decision_point(connection: HTTPConnection) -> DecisionPoint:
    """The decision point as a dependency (async: it only reads app state, so it needs no thread)."""
    return point_of(connection)


Point = Annotated[DecisionPoint, Depends(decision_point)]


def http_status(error: ApprovalError) -> int:
    """The status of a refused change, the same on the API and the dashboard."""
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, Conflict):
        return 409
    return 422


def refused(error: ApprovalError) -> HTTPException:
    return HTTPException(http_status(error), make_visible(str(error)))


# --- approvals -----------------------------------------------------------------------------------

ToolName = Annotated[str, Path(max_length=1000, pattern=NO_NUL, description="The tool's name (URL-encoded)")]
Note = Annotated[
    StoredText, Field(max_length=4000, pattern=NO_NUL, description="Why: kept with the approval")
]
Actor = Annotated[
    ShortStoredText | None,
    Field(
        default=None,
        description="Free text kept in the note (`for <by>: ...`); the actor is the token's name",
    ),
]


def with_by(note: str, by: str | None) -> str:
    """A note that keeps an earlier release's `by` as text, never as the actor."""
    return f"for {by}: {note}".rstrip(": ") if by else note


class ApprovalIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="The version to approve (default: the current one)"
    )
    tools: list[ToolNameText] | None = Field(
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

    mode: ApprovalMode
    note: Note = ""
    by: Actor = None


@router.get(
    "/servers/{name}/approvals",
    summary="The approval history, newest first",
    dependencies=[Depends(may_read)],
    responses=not_found("server"),
)
def list_approvals(
    name: ServerName,
    session: ReadSession,
    tool: Annotated[str | None, Query(max_length=1000, pattern=NO_NUL, description="Only this tool")] = None,
) -> list[ApprovalRecord]:
    record = find_server_or_404(session, name)
    if tool is not None and not storable(tool):
        return []
    return storage.history(session, session.get_one(Server, record.id), tool)


@router.post(
    "/servers/{name}/approvals",
    status_code=201,
    summary="Approve the tools' definitions as they are in a version",
    dependencies=[Depends(may_approve)],
    responses={
        **WRITE_ERRORS,
        **not_found("server, version or tool"),
        409: {"model": ErrorOut, "description": "The server has not been polled yet"},
    },
)
def approve(name: ServerName, body: ApprovalIn, web: Web, act: Acting) -> ApprovedOut:
    note = with_by(body.note, body.by)
    request = service.ApprovalRequest(name, body.version, body.tools, note, body.resolve_alerts)
    try:
        done = service.approve(act.session, request, actor=act.actor, now=act.at, policy=web.alerting)
    except ApprovalError as exc:
        raise refused(exc) from None
    act.record(
        "approval.approve",
        name,
        version=done.version,
        tools=sorted({a.tool for a in done.approvals if a.tool}),
        resolved_alerts=done.resolved_alerts,
        note=note,
    )
    return ApprovedOut(version=done.version, approvals=done.approvals, resolved_alerts=done.resolved_alerts)


@router.delete(
    "/servers/{name}/approvals/{tool:path}",
    summary="Revoke a tool's approval: it is asked about until approved again",
    dependencies=[Depends(may_approve)],
    responses={**WRITE_ERRORS, **not_found("server or approval")},
)
def revoke(
    name: ServerName,
    tool: ToolName,
    act: Acting,
    note: Annotated[str, Query(max_length=4000, pattern=NO_NUL)] = "",
    by: Annotated[str | None, Query(max_length=200, pattern=NO_NUL)] = None,
) -> ApprovalRecord:
    try:
        event = service.revoke(act.session, name, tool, note=with_by(note, by), actor=act.actor, now=act.at)
    except ApprovalError as exc:
        raise refused(exc) from None
    act.record("approval.revoke", name, tool=tool, note=with_by(note, by))
    return event


@router.put(
    "/servers/{name}/approval",
    summary="Set the server's approval mode (tofu, review or off)",
    dependencies=[Depends(may_approve)],
    responses={
        **WRITE_ERRORS,
        **not_found("server"),
        409: {"model": ErrorOut, "description": "The server comes from a config file: set `approval` there"},
    },
)
def set_mode(name: ServerName, body: ModeIn, act: Acting) -> ServerRecord:
    note = with_by(body.note, body.by)
    try:
        changed = service.set_mode(act.session, name, body.mode, note=note, actor=act.actor, now=act.at)
    except ApprovalError as exc:
        raise refused(exc) from None
    if changed:
        act.record("approval.mode", name, mode=body.mode.value, note=note)
    return find_server_or_404(act.session, name)


# --- decisions -----------------------------------------------------------------------------------

decisions = APIRouter(
    prefix="/api/v1",
    tags=["decisions"],
    dependencies=[Depends(may_decide)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)


class Hints(BaseModel):
    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool


class DecisionAnnotations(BaseModel):
    approved: Hints | None = Field(description="Effective hints of the approved definition")
    current: Hints | None = Field(description="Effective hints of the current definition")
    enforced: Hints | None = Field(
        description="The stricter of the two per field: read-only and idempotent only if both say so, "
        "destructive and open-world if either does"
    )


class DecisionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    server: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME)
    tool: StoredText = Field(min_length=1, max_length=1000, pattern=NO_NUL)
    fingerprint: str | None = Field(
        default=None,
        pattern=FINGERPRINT,
        description="The fingerprint of the listing the caller holds; a different one adds `stale-listing`",
    )
    session_id: StoredText | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=NO_NUL,
        description="Registers or heart-beats this host session (see /sessions)",
    )
    client: StoredText | None = Field(default=None, max_length=500, pattern=NO_NUL)
    client_capabilities: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="The capabilities the host declared to the server: the answer is judged on the client "
        "view that declared the same (unknown: on every view, the strictest answer)",
    )


class DecisionOut(BaseModel):
    server: str
    tool: str
    decision: Literal["allow", "ask", "deny"]
    reason: str = Field(description="One sentence a person understands")
    reasons: list[str] = Field(
        description="Reason codes: approved, approval-off, never-polled, not-approved, "
        "changed-since-approval, tool-removed, unknown-tool, poisoned-text, poisoned-instructions; "
        "plus stale-listing"
    )
    rule: str | None = Field(
        description="The rule behind a changed-since-approval, poisoned-text or poisoned-instructions answer"
    )
    severity: str | None
    approved_version: int | None
    current_version: int | None
    fingerprint: str | None = Field(description="The fingerprint of the server's current listing")
    annotations: DecisionAnnotations


BUSY = "too many decisions at once: not decided, ask again shortly (until then, fail closed)"


def busy(_body: bytes) -> Response:
    """The decision API's answer when the decision lane is full (`monitor.approvals.lane`): a 503
    with `Retry-After`, which a gateway treats as any failure to decide: it does not call the tool."""
    return ApiJSONResponse({"detail": BUSY}, 503, headers={"Retry-After": "1"})


@decisions.post(
    "/decisions",
    summary="Should this tool be called now? allow, ask or deny, with the reason",
    response_model=DecisionOut,
    responses={**not_found("server"), 503: {"model": ErrorOut, "description": BUSY}},
)
async def decide(body: DecisionIn, point: Point, request: Request) -> Response:
    """Answered straight from the verdict's JSON (its shape is `DecisionOut`): no second validation
    on the path every tool call takes. Decided on the decision lane's threads; a request the lane
    had no room for in time is answered 503 before it gets here (`busy`)."""
    lane: DecisionLane = request.app.state.decision_lane
    answer = await lane.run(
        point.decide,
        body.server,
        body.tool,
        fingerprint=body.fingerprint,
        session_id=body.session_id,
        client=body.client,
        client_capabilities=body.client_capabilities,
    )
    if answer is None:
        raise HTTPException(404, f"no server named {body.server!r}")
    return ApiJSONResponse(answer.to_dict())


class EnforcedTool(BaseModel):
    decision: Literal["allow", "ask", "deny"]
    approved_version: int | None
    enforced: Hints | None


class EnforcedOut(BaseModel):
    server: str
    current_version: int | None
    fingerprint: str | None
    tools: dict[str, EnforcedTool] = Field(description="Every tool of the current listing, by name")


@router.get(
    "/servers/{name}/annotations/enforced",
    tags=["decisions"],
    dependencies=[Depends(read_or_decide)],
    summary="The enforced annotations of every current tool, for gateways that assert reviewed ones",
    responses=not_found("server"),
)
def enforced(name: ServerName, point: Point) -> EnforcedOut:
    current = point.current(name)
    if current is None:
        raise HTTPException(404, f"no server named {name!r}")
    view, verdicts = current
    tools = {}
    for tool, verdict in verdicts.items():
        tools[tool] = EnforcedTool(
            decision=verdict.decision.value,
            approved_version=verdict.approved_version,
            enforced=Hints.model_validate(verdict.enforced) if verdict.enforced else None,
        )
    return EnforcedOut(
        server=view.name,
        current_version=view.current_version,
        fingerprint=view.current_fingerprint,
        tools=tools,
    )
