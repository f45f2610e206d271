"""Host adapters (docs/contract.md sections 10 and 11): a decision in the shapes hosts send and expect.

`POST /api/v1/decisions` (`monitor.approvals.api`) is the general form; the Claude Code
`PreToolUse` hook and the ToolHive HTTP PDP are the same decision, asked of the same
`DecisionPoint`. Handlers are sync (a decision may read the database), so FastAPI runs them in its
threadpool, off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from monitor.approvals.api import Point
from monitor.approvals.point import Answer, DecisionPoint
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind
from monitor.core.text import make_visible
from monitor.webapp.api.schemas import ERRORS, ApiJSONResponse
from monitor.webapp.context import WebContext
from monitor.webapp.deps import BEARER_REQUIRED, Bearer, Web, context_of, require_read

router = APIRouter(
    prefix="/api/v1",
    tags=["decisions"],
    dependencies=[Depends(require_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
TOOLHIVE_DECISION_PATH = "/api/v1/pdp/toolhive/decision"


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
    if not storable(tool) or (hook.session_id is not None and not storable(hook.session_id)):
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
    if prefix or feature != "tool" or not host_name or not tool or not storable(tool):
        return PdpOut(allow=False)
    subject = porc.principal.get("sub")
    answer = point.decide(
        point.server_name(host_name),
        tool,
        client=f"toolhive ({subject})" if isinstance(subject, str) and storable(subject) else "toolhive",
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
