"""The decision point over HTTP (SPEC sections 10 and 11): decisions, enforced annotations, host adapters.

`POST /api/v1/decisions` is the general form; the Claude Code `PreToolUse` hook and the ToolHive
HTTP PDP are the same decision in the shapes those tools send and expect. Handlers are sync
(the decision may write), so FastAPI runs them in its threadpool, off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from monitor.core.states import DecisionKind
from monitor.core.text import make_visible
from monitor.webapp.api.schemas import (
    ERRORS,
    FINGERPRINT,
    NO_NUL,
    SERVER_NAME,
    ApiJSONResponse,
    not_found,
    unprocessable,
)
from monitor.webapp.context import WebContext
from monitor.webapp.decisionpoint import Answer, DecisionPoint, decision_point
from monitor.webapp.deps import (
    BEARER_REQUIRED,
    Bearer,
    ServerName,
    Web,
    context_of,
    db_safe,
    require_read,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["decisions"],
    dependencies=[Depends(require_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
Point = Annotated[DecisionPoint, Depends(decision_point)]

TOOLHIVE_DECISION_PATH = "/api/v1/pdp/toolhive/decision"


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
    tool: str = Field(min_length=1, max_length=1000, pattern=NO_NUL)
    fingerprint: str | None = Field(
        default=None,
        pattern=FINGERPRINT,
        description="The fingerprint of the listing the caller holds; a different one adds `stale-listing`",
    )
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=NO_NUL,
        description="Registers or heart-beats this host session (see /sessions)",
    )
    client: str | None = Field(default=None, max_length=500, pattern=NO_NUL)


class DecisionOut(BaseModel):
    server: str
    tool: str
    decision: Literal["allow", "ask", "deny"]
    reason: str = Field(description="One sentence a person understands")
    reasons: list[str] = Field(
        description="Reason codes: approved, approval-off, never-polled, not-approved, "
        "changed-since-approval, tool-removed, unknown-tool; plus stale-listing"
    )
    rule: str | None = Field(description="The rule behind a changed-since-approval answer")
    severity: str | None
    approved_version: int | None
    current_version: int | None
    fingerprint: str | None = Field(description="The fingerprint of the server's current listing")
    annotations: DecisionAnnotations


def _check_text(value: str | None, loc: list[str | int]) -> None:
    if value is not None and not db_safe(value):
        raise unprocessable(loc, "must not contain NUL characters or lone surrogates")


@router.post(
    "/decisions",
    summary="Should this tool be called now? allow, ask or deny, with the reason",
    response_model=DecisionOut,
    responses=not_found("server"),
)
def decide(body: DecisionIn, point: Point) -> Response:
    """Answered straight from the verdict's JSON (its shape is `DecisionOut`): no second validation
    on the path every tool call takes."""
    _check_text(body.tool, ["body", "tool"])
    _check_text(body.session_id, ["body", "session_id"])
    _check_text(body.client, ["body", "client"])
    answer = point.decide(
        body.server, body.tool, fingerprint=body.fingerprint, session_id=body.session_id, client=body.client
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
    summary="The enforced annotations of every current tool, for gateways that assert reviewed ones",
    responses=not_found("server"),
)
def enforced(name: ServerName, point: Point) -> EnforcedOut:
    view = point.view.server(name)
    if view is None:
        raise HTTPException(404, f"no server named {name!r}")
    tools = {}
    for tool in sorted(view.tools):
        verdict = view.verdict(tool)
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


# --- Claude Code ---------------------------------------------------------------------------------


class PreToolUseIn(BaseModel):
    """A Claude Code hook input. Fields Claude Code adds later are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    session_id: str | None = Field(default=None, max_length=200)
    hook_event_name: str = Field(max_length=100)
    tool_name: str = Field(max_length=1000)
    tool_input: Any = None
    transcript_path: str | None = None
    cwd: str | None = None
    tool_use_id: str | None = None


class HookSpecificOutput(BaseModel):
    hookEventName: Literal["PreToolUse"] = "PreToolUse"
    permissionDecision: Literal["allow", "ask", "deny"]
    permissionDecisionReason: str


class HookOut(BaseModel):
    """With an opinion, `hookSpecificOutput`; without one (not an MCP tool, or a server the monitor
    does not know) an empty object, so Claude Code's own permission rules decide as without the hook."""

    hookSpecificOutput: HookSpecificOutput | None = None


def split_mcp_tool_name(name: str) -> tuple[str, str] | None:
    """`mcp__<server>__<tool>` -> (server, tool); None for tools that are not MCP tools."""
    if not name.startswith("mcp__"):
        return None
    server, separator, tool = name[len("mcp__") :].partition("__")
    if not separator or not server or not tool:
        return None
    return server, tool


def claude_code_answer(point: DecisionPoint, hook: PreToolUseIn) -> HookOut:
    split = split_mcp_tool_name(hook.tool_name)
    if hook.hook_event_name != "PreToolUse" or split is None:
        return HookOut()
    host_name, tool = split
    if not db_safe(tool) or (hook.session_id is not None and not db_safe(hook.session_id)):
        return HookOut()
    answer = point.decide(
        point.server_name(host_name), tool, session_id=hook.session_id or None, client="claude-code"
    )
    if answer is None:
        return HookOut()
    return HookOut(
        hookSpecificOutput=HookSpecificOutput(
            permissionDecision=answer.verdict.decision.value,
            permissionDecisionReason=_hook_reason(answer),
        )
    )


def _hook_reason(answer: Answer) -> str:
    return f"drift-monitor: {make_visible(answer.verdict.reason)}"


@router.post(
    "/hooks/claude-code",
    summary="Claude Code PreToolUse HTTP hook: the decision as permissionDecision",
    response_model_exclude_none=True,
)
def claude_code_hook(body: PreToolUseIn, point: Point) -> HookOut:
    return claude_code_answer(point, body)


# --- ToolHive ------------------------------------------------------------------------------------


def toolhive_token_ok(web: WebContext, request: Request) -> bool:
    """ToolHive's HTTP PDP client sends no headers of its own, but Go sends the userinfo of its URL
    as Basic authentication: `http://drift-monitor:<token>@host/...` carries the token as the password."""
    if web.token is None or web.bearer_ok(request):
        return True
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    _, _, password = decoded.partition(":")
    return hmac.compare_digest(password.encode(), web.token.encode())


async def require_toolhive(request: Request, web: Web, _credentials: Bearer = None) -> None:
    if not toolhive_token_ok(web, request):
        raise HTTPException(401, BEARER_REQUIRED, {"WWW-Authenticate": "Bearer"})


pdp = APIRouter(
    tags=["decisions"],
    dependencies=[Depends(require_toolhive)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
"""The ToolHive endpoint: the token as a bearer or as the password of Basic authentication."""


class PorcIn(BaseModel):
    """ToolHive's PORC: principal, operation (`mcp:tool:call`), resource (`mrn:mcp:<server>:tool:<name>`)."""

    model_config = ConfigDict(extra="allow")

    principal: dict[str, Any] = Field(default_factory=dict)
    operation: str = Field(max_length=200)
    resource: str = Field(max_length=2000)
    context: dict[str, Any] = Field(default_factory=dict)


class PdpOut(BaseModel):
    allow: bool


def toolhive_answer(point: DecisionPoint, porc: PorcIn) -> PdpOut:
    """Only tool calls are the monitor's business: other operations are allowed. ToolHive has no
    dialog, so `ask` is answered as not allowed until a person approves the tool."""
    if porc.operation != "mcp:tool:call":
        return PdpOut(allow=True)
    prefix, _, rest = porc.resource.partition("mrn:mcp:")
    host_name, _, feature_and_tool = rest.partition(":")
    feature, _, tool = feature_and_tool.partition(":")
    if prefix or feature != "tool" or not host_name or not tool or not db_safe(tool):
        return PdpOut(allow=False)
    subject = porc.principal.get("sub")
    answer = point.decide(
        point.server_name(host_name),
        tool,
        client=f"toolhive ({subject})" if isinstance(subject, str) and db_safe(subject) else "toolhive",
    )
    if answer is None:
        return PdpOut(allow=True)
    return PdpOut(allow=answer.verdict.decision == DecisionKind.ALLOW)


@pdp.post(TOOLHIVE_DECISION_PATH, summary="ToolHive HTTP PDP (httpv1): the decision as allow true/false")
def toolhive_decision(body: PorcIn, point: Point) -> PdpOut:
    return toolhive_answer(point, body)


def is_toolhive_request(web_request: Request) -> bool:
    """For the app's early token check: the PDP path also takes the token as Basic authentication."""
    return web_request.url.path == TOOLHIVE_DECISION_PATH and toolhive_token_ok(
        context_of(web_request), web_request
    )
