"""Host adapters (docs/contract.md sections 10 and 11): a decision in the shapes hosts send and expect.

`POST /api/v1/decisions` (`monitor.approvals.api`) is the general form; each host's hook asks the same
`DecisionPoint`, then answers in the host's own terms without widening what the host allows on its
own (docs/approvals.md has each host's contract, with its sources):

- Claude Code `PreToolUse` (HTTP or command hook): `allow` skips Claude Code's own prompt, so an
  approved tool gets no opinion (`{}`) unless `[decisions] hook_allow_approved` opts in.
- Codex `PreToolUse` (command hook): it takes only a deny; `ask` is answered as a deny that says a
  person must approve the tool first (Codex runs a tool whose hook says "ask").
- Gemini CLI `BeforeTool` (command hook): deny, ask, or no opinion; `mcp_context` names the server.
- ToolHive's HTTP PDP: `{"allow": bool}`; it has no prompt, so only an allow lets a call run.

A host lets the call run when its hook fails (a non-2xx answer, a timeout, an unreadable answer), so
every request is answered 200: a caller without the right to ask (no token, a wrong, revoked or
expired one, another role), an input that cannot be read, nested too deeply or larger than the
limit, and a failure while deciding are each a deny with the reason. A decision never reads the
tool's input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from monitor.approvals.api import Point
from monitor.approvals.inputs import Unreadable, read_object
from monitor.approvals.lane import DecisionLane
from monitor.approvals.names import claude_name, exact_name, gemini_name
from monitor.approvals.point import Answer, DecisionPoint, Unmonitored
from monitor.config import Config
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind
from monitor.core.text import make_visible
from monitor.identity.callers import declares_bearer, hook_refusal
from monitor.webapp.api.schemas import ERRORS, ApiJSONResponse
from monitor.webapp.context import WebContext
from monitor.webapp.deps import Web

router = APIRouter(
    prefix="/api/v1",
    tags=["decisions"],
    dependencies=[Depends(declares_bearer)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
TOOLHIVE_DECISION_PATH = "/api/v1/pdp/toolhive/decision"
HOOK_PATHS = frozenset(
    {"/api/v1/hooks/claude-code", "/api/v1/hooks/codex", "/api/v1/hooks/gemini-cli", TOOLHIVE_DECISION_PATH}
)
"""Paths that read their body themselves, so that one over the size limit is answered, not refused."""
log = logging.getLogger(__name__)
REASON_LIMIT = 2000
"""Characters of a reason sent to a host (Claude Code caps its hook output at 10,000)."""


class HookInput(BaseModel):
    """A `PreToolUse` (Claude Code, Codex) or `BeforeTool` (Gemini CLI) hook input: what the OpenAPI
    document shows. The handlers read the body themselves and never reject it."""

    model_config = ConfigDict(extra="allow")

    hook_event_name: str
    tool_name: str
    session_id: str | None = None
    tool_input: Any = None
    mcp_context: dict[str, Any] | None = Field(default=None, description="Gemini CLI: the MCP server")


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


async def read_input(request: Request, limit: int) -> dict[str, Any] | str:
    """The hook input's JSON object, or why it cannot be read (never an exception)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return f"the hook input is larger than the {limit}-byte limit"
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return f"the hook input is larger than the {limit}-byte limit"
        chunks.append(chunk)
    try:
        return read_object(b"".join(chunks))
    except Unreadable as exc:
        return str(exc)


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and storable(value) else None


def host_reason(text: str) -> str:
    """A reason as hosts and gateways are told it: named as the monitor's, made visible, bounded."""
    reason = f"drift-monitor: {make_visible(text)}"
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 1] + "…"


def _opinion(point: DecisionPoint, found: Answer | Unmonitored) -> tuple[DecisionKind, str] | None:
    """What a host that has its own prompt should hear: None for no opinion (an approved tool, a
    server whose decisions are off, an unmonitored server under `unmonitored = "none"`)."""
    settings = point.config.decisions
    if isinstance(found, Unmonitored):
        if settings.unmonitored == "none":
            return None
        return DecisionKind(settings.unmonitored), (
            f"no monitored server is named {found.name!r} ([decisions] unmonitored = "
            f"{settings.unmonitored!r})"
        )
    verdict = found.verdict
    if verdict.decision == DecisionKind.ALLOW:
        if verdict.reason_code == "approved" and settings.hook_allow_approved:
            return DecisionKind.ALLOW, verdict.reason
        return None
    return verdict.decision, verdict.reason


def _mcp_call(hook: dict[str, Any] | str, event: str, prefix: str) -> bool | None:
    """Whether a hook input is about an MCP tool: its `event`, and a tool named with `prefix` or an
    `mcp_context` (None: it cannot be read, which is a deny). Gemini CLI's answer and every host's
    answer without deciding read it so."""
    if isinstance(hook, str):
        return None
    tool_name, name = hook.get("tool_name"), hook.get("hook_event_name")
    if not isinstance(tool_name, str) or not isinstance(name, str):
        return None
    return name == event and (tool_name.startswith(prefix) or isinstance(hook.get("mcp_context"), dict))


def _unreadable(hook: dict[str, Any] | str) -> str:
    return hook if isinstance(hook, str) else "the hook input has no tool_name or hook_event_name"


# --- Claude Code and Codex ------------------------------------------------------------------------


class HookSpecificOutput(BaseModel):
    hookEventName: Literal["PreToolUse"] = "PreToolUse"
    permissionDecision: DecisionKind
    permissionDecisionReason: str


class HookOut(BaseModel):
    """With an opinion, `hookSpecificOutput`; without one an empty object, so the host's own permission
    rules decide as they would without the hook."""

    hookSpecificOutput: HookSpecificOutput | None = None


def _pre_tool_use(decision: DecisionKind, reason: str) -> HookOut:
    return HookOut(
        hookSpecificOutput=HookSpecificOutput(
            permissionDecision=decision, permissionDecisionReason=host_reason(reason)
        )
    )


def _mcp_tool(point: DecisionPoint, host: str, hook: dict[str, Any]) -> Answer | Unmonitored | str | None:
    """The decision about a `mcp__<server>__<tool>` call, why the input cannot be judged, or None
    when it is not a `PreToolUse` call of an MCP tool (not the monitor's business)."""
    tool_name = hook.get("tool_name")
    if not isinstance(tool_name, str) or not isinstance(hook.get("hook_event_name"), str):
        return "the hook input has no tool_name or hook_event_name"
    if hook["hook_event_name"] != "PreToolUse" or not tool_name.startswith("mcp__"):
        return None
    if not storable(tool_name):
        return "the tool name holds characters no server name or tool name can have"
    return point.decide_for_host(
        host,
        tool_name,
        prefix="mcp__",
        separator="__",
        normalise=claude_name,
        session_id=_string(hook.get("session_id")),
        client=host,
    )


def claude_code_answer(point: DecisionPoint, hook: dict[str, Any] | str) -> HookOut:
    found = _mcp_tool(point, "claude-code", hook) if isinstance(hook, dict) else hook
    if found is None:
        return HookOut()
    if isinstance(found, str):
        return _pre_tool_use(DecisionKind.DENY, found)
    opinion = _opinion(point, found)
    return HookOut() if opinion is None else _pre_tool_use(*opinion)


def codex_answer(point: DecisionPoint, hook: dict[str, Any] | str) -> HookOut:
    """Codex takes a deny (with a reason) or no opinion: an `allow` or `ask` from a hook is an error
    there, and Codex then runs the tool. So `ask` is answered as a deny saying why."""
    found = _mcp_tool(point, "codex", hook) if isinstance(hook, dict) else hook
    if found is None:
        return HookOut()
    if isinstance(found, str):
        return _pre_tool_use(DecisionKind.DENY, found)
    opinion = _opinion(point, found)
    if opinion is None or opinion[0] == DecisionKind.ALLOW:
        return HookOut()
    decision, reason = opinion
    if decision == DecisionKind.ASK:
        reason = f"a person must approve this call first (Codex hooks cannot ask): {reason}"
    return _pre_tool_use(DecisionKind.DENY, reason)


HookAnswer = Callable[[DecisionPoint, "dict[str, Any] | str"], BaseModel]


async def _answer_hook(
    request: Request, point: DecisionPoint, web: WebContext, answer: HookAnswer
) -> Response:
    """The host's answer, 200 whatever happens: a caller that may not ask (no token, a wrong or
    revoked one, another role, a database that cannot check it) and a failure while deciding are
    denies, because the host would run the call on a 401, a 403 or a 500."""
    refused = hook_refusal(request)
    hook = refused if refused is not None else await read_input(request, web.config.monitor.max_request_bytes)
    lane: DecisionLane = request.app.state.decision_lane
    try:
        result = await lane.run(answer, point, hook)
    except Exception:
        log.exception("a hook decision failed: answered deny")
        result = answer(point, "the monitor failed while deciding (see its log)")
    return ApiJSONResponse(result.model_dump(exclude_none=True))


@router.post(
    "/hooks/claude-code",
    summary="Claude Code PreToolUse hook: deny, ask, or no opinion (allow only when opted in)",
    response_model=HookOut,
    response_model_exclude_none=True,
    openapi_extra=_documented(HookInput),
)
async def claude_code_hook(request: Request, point: Point, web: Web) -> Response:
    return await _answer_hook(request, point, web, claude_code_answer)


@router.post(
    "/hooks/codex",
    summary="Codex PreToolUse hook: deny (an ask is a deny) or no opinion",
    response_model=HookOut,
    response_model_exclude_none=True,
    openapi_extra=_documented(HookInput),
)
async def codex_hook(request: Request, point: Point, web: Web) -> Response:
    return await _answer_hook(request, point, web, codex_answer)


# --- Gemini CLI ------------------------------------------------------------------------------------


class GeminiOut(BaseModel):
    """Gemini CLI's hook output: `deny` (the reason goes to the model) or `ask`; empty: no opinion."""

    decision: DecisionKind | None = None
    reason: str | None = None
    systemMessage: str | None = None


def gemini_answer(point: DecisionPoint, hook: dict[str, Any] | str) -> GeminiOut:
    """MCP tools are `mcp_<server>_<tool>`, and `mcp_context` names the server and the tool as they
    are (the flat name is ambiguous when a server name holds `_`), so the context is used when sent."""
    mcp = _mcp_call(hook, "BeforeTool", "mcp_")
    if mcp is None or isinstance(hook, str):
        return GeminiOut(decision=DecisionKind.DENY, reason=host_reason(_unreadable(hook)))
    if not mcp:
        return GeminiOut()
    tool_name, context = hook["tool_name"], hook.get("mcp_context")
    session_id = _string(hook.get("session_id"))
    found: Answer | Unmonitored
    if (
        isinstance(context, dict)
        and _string(context.get("server_name"))
        and _string(context.get("tool_name"))
    ):
        found = point.decide_for_named_host(
            "gemini-cli",
            context["server_name"],
            context["tool_name"],
            normalise=exact_name,
            session_id=session_id,
            client="gemini-cli",
        )
    elif storable(tool_name):
        found = point.decide_for_host(
            "gemini-cli",
            tool_name,
            prefix="mcp_",
            separator="_",
            normalise=gemini_name,
            session_id=session_id,
            client="gemini-cli",
        )
    else:
        return GeminiOut(
            decision=DecisionKind.DENY, reason=host_reason("the tool name holds characters no tool can have")
        )
    opinion = _opinion(point, found)
    if opinion is None or opinion[0] == DecisionKind.ALLOW:  # Gemini's allow only goes on to its policy
        return GeminiOut()
    decision, reason = opinion
    return GeminiOut(decision=decision, reason=host_reason(reason), systemMessage=host_reason(reason))


@router.post(
    "/hooks/gemini-cli",
    summary="Gemini CLI BeforeTool hook: deny, ask, or no opinion",
    response_model=GeminiOut,
    response_model_exclude_none=True,
    openapi_extra=_documented(HookInput),
)
async def gemini_hook(request: Request, point: Point, web: Web) -> Response:
    return await _answer_hook(request, point, web, gemini_answer)


# --- ToolHive ------------------------------------------------------------------------------------


pdp = APIRouter(
    tags=["decisions"],
    dependencies=[Depends(declares_bearer)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
"""The ToolHive endpoint: the token as a bearer, or as the password of Basic authentication (ToolHive's
PDP client sends no headers of its own, but Go sends the userinfo of its URL as Basic authentication:
`http://drift-monitor:<token>@host/...`); `monitor.identity.callers` reads both."""


class PorcIn(BaseModel):
    """ToolHive's PORC: principal, operation (`mcp:tool:call`), resource (`mrn:mcp:<server>:tool:<name>`)."""

    model_config = ConfigDict(extra="allow")

    principal: dict[str, Any] = Field(default_factory=dict)
    operation: str = Field(max_length=200)
    resource: str = Field(max_length=2000)
    context: dict[str, Any] = Field(default_factory=dict)


class PdpOut(BaseModel):
    allow: bool


def toolhive_answer(point: DecisionPoint, porc: dict[str, Any] | str) -> PdpOut:
    """Only tool calls are the monitor's business: other operations are allowed. ToolHive has no
    prompt, so only an allow lets a call run: `ask` is not allowed until a person approves the tool,
    and an unmonitored server is allowed only under `unmonitored = "none"`."""
    if isinstance(porc, str):
        return PdpOut(allow=False)
    operation, resource = porc.get("operation"), porc.get("resource")
    if not isinstance(operation, str) or not isinstance(resource, str):
        return PdpOut(allow=False)
    if operation != "mcp:tool:call":
        return PdpOut(allow=True)
    prefix, _, rest = resource.partition("mrn:mcp:")
    host_name, _, feature_and_tool = rest.partition(":")
    feature, _, tool = feature_and_tool.partition(":")
    if prefix or feature != "tool" or not host_name or not tool or not storable(resource):
        return PdpOut(allow=False)
    principal = porc.get("principal")
    subject = _string(principal.get("sub")) if isinstance(principal, dict) else None
    found = point.decide_for_named_host(
        "toolhive",
        host_name,
        tool,
        normalise=exact_name,
        client=f"toolhive ({subject})" if subject else "toolhive",
    )
    if isinstance(found, Unmonitored):
        return PdpOut(allow=point.config.decisions.unmonitored == "none")
    return PdpOut(allow=found.verdict.decision == DecisionKind.ALLOW)


@pdp.post(
    TOOLHIVE_DECISION_PATH,
    summary="ToolHive HTTP PDP (httpv1): the decision as allow true/false",
    response_model=PdpOut,
    openapi_extra=_documented(PorcIn),
)
async def toolhive_decision(request: Request, point: Point, web: Web) -> Response:
    return await _answer_hook(request, point, web, toolhive_answer)


# --- answers without deciding (the decision lane is full: `monitor.approvals.lane`) ----------------

BUSY_REASON = (
    "too many decisions at once: answered without deciding (the monitor could not verify this tool "
    "in time; ask again)"
)


def busy_decision(config: Config) -> DecisionKind:
    """What a call the monitor had no time to decide gets: what it cannot verify recently gets,
    `[decisions] stale_decision` (ask, or deny); never allow."""
    return DecisionKind(config.decisions.stale_decision)


def _busy_claude(hook: dict[str, Any] | str, decision: DecisionKind) -> BaseModel:
    mcp = _mcp_call(hook, "PreToolUse", "mcp__")
    if mcp is None:
        return _pre_tool_use(DecisionKind.DENY, _unreadable(hook))
    return _pre_tool_use(decision, BUSY_REASON) if mcp else HookOut()


def _busy_codex(hook: dict[str, Any] | str, decision: DecisionKind) -> BaseModel:
    """Codex takes only a deny (`codex_answer`)."""
    mcp = _mcp_call(hook, "PreToolUse", "mcp__")
    if mcp is None:
        return _pre_tool_use(DecisionKind.DENY, _unreadable(hook))
    return _pre_tool_use(DecisionKind.DENY, BUSY_REASON) if mcp else HookOut()


def _busy_gemini(hook: dict[str, Any] | str, decision: DecisionKind) -> BaseModel:
    mcp = _mcp_call(hook, "BeforeTool", "mcp_")
    if mcp is False:
        return GeminiOut()
    kind, reason = (decision, BUSY_REASON) if mcp else (DecisionKind.DENY, _unreadable(hook))
    return GeminiOut(decision=kind, reason=host_reason(reason), systemMessage=host_reason(reason))


def _busy_toolhive(porc: dict[str, Any] | str, decision: DecisionKind) -> BaseModel:
    """Not even operations other than tool calls: the caller was not identified."""
    return PdpOut(allow=False)


BUSY: dict[str, Callable[[dict[str, Any] | str, DecisionKind], BaseModel]] = {
    "/api/v1/hooks/claude-code": _busy_claude,
    "/api/v1/hooks/codex": _busy_codex,
    "/api/v1/hooks/gemini-cli": _busy_gemini,
    TOOLHIVE_DECISION_PATH: _busy_toolhive,
}
"""Each host's answer to a call decided without deciding: fail-closed in its own terms."""


def busy_answers(config: Config) -> dict[str, Callable[[bytes], Response]]:
    """For `monitor.approvals.lane.Admission`: each hook path's answer, from the request's body, when
    the lane is full. The caller was not identified, so nothing here is an allow."""
    decision = busy_decision(config)

    def answering(path: str) -> Callable[[bytes], Response]:
        def answer(body: bytes) -> Response:
            try:
                hook: dict[str, Any] | str = read_object(body)
            except Unreadable as exc:
                hook = str(exc)
            return ApiJSONResponse(BUSY[path](hook, decision).model_dump(exclude_none=True))

        return answer

    return {path: answering(path) for path in BUSY}
