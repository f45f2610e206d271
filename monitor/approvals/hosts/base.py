"""What every host adapter is, and what they share: reading a hook's input, a reason as hosts are
told it, and what a host with its own prompt should hear of a decision.

A host lets the call run when its hook fails (a non-2xx answer, a timeout, an unreadable answer), so
an adapter answers every input, whatever it is: an input that cannot be read, a caller without the
right to ask and a failure while deciding each reach the host as its own deny. A decision never
reads the tool's input.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from monitor.approvals.inputs import Unreadable, read_object
from monitor.approvals.point import Answer, DecisionPoint, Unmonitored
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind
from monitor.core.text import make_visible

REASON_LIMIT = 2000
"""Characters of a reason sent to a host (Claude Code caps its hook output at 10,000)."""
BUSY_REASON = (
    "too many decisions at once: answered without deciding (the monitor could not verify this tool "
    "in time; ask again)"
)
Hook = dict[str, Any] | str
"""A hook's input as read: its JSON object, or why it could not be read (`read_input`)."""


class HostAdapter:
    """One host's or gateway's "before a tool call" hook over HTTP: where it asks, what it sends, and
    its answers. Every subclass in a module of `monitor.approvals.hosts` is an adapter: the package
    finds it there and serves it at its `path`."""

    host: ClassVar[str]
    """The adapter's name: decisions and unmonitored names are recorded under it."""
    path: ClassVar[str]
    """Where the host posts its hook input."""
    endpoint: ClassVar[str]
    """The route's name: its OpenAPI operation id."""
    summary: ClassVar[str]
    input: ClassVar[type[BaseModel]]
    """The hook input as the OpenAPI document shows it (the handler reads the body itself)."""
    output: ClassVar[type[BaseModel]]
    basic_auth: ClassVar[bool] = False
    """Whether the host sends the token as the password of Basic authentication (ToolHive)."""

    def answer(self, point: DecisionPoint, hook: Hook) -> BaseModel:
        """The host's answer to `hook` (why it could not be read, when a string): never an error."""
        raise NotImplementedError(f"{type(self).__name__} answers no hook")

    def busy(self, hook: Hook, decision: DecisionKind) -> BaseModel:
        """The answer when the monitor had no time to decide: `decision` (never allow) in the host's
        terms, for a call it would have judged; the caller was not identified, so nothing is allowed."""
        raise NotImplementedError(f"{type(self).__name__} has no answer for a full lane")


class HookInput(BaseModel):
    """A `PreToolUse` (Claude Code, Codex) or `BeforeTool` (Gemini CLI) hook input: what the OpenAPI
    document shows. The handlers read the body themselves and never reject it."""

    model_config = ConfigDict(extra="allow")

    hook_event_name: str
    tool_name: str
    session_id: str | None = None
    tool_input: Any = None
    mcp_context: dict[str, Any] | None = Field(default=None, description="Gemini CLI: the MCP server")


async def read_input(request: Request, limit: int) -> Hook:
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
    return read_body(b"".join(chunks))


def read_body(body: bytes) -> Hook:
    try:
        return read_object(body)
    except Unreadable as exc:
        return str(exc)


def text(value: Any) -> str | None:
    """A string a server or session name can be, or None."""
    return value if isinstance(value, str) and storable(value) else None


def host_reason(reason: str) -> str:
    """A reason as hosts and gateways are told it: named as the monitor's, made visible, bounded."""
    said = f"drift-monitor: {make_visible(reason)}"
    return said if len(said) <= REASON_LIMIT else said[: REASON_LIMIT - 1] + "…"


def opinion(point: DecisionPoint, found: Answer | Unmonitored) -> tuple[DecisionKind, str] | None:
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


def mcp_call(hook: Hook, event: str, prefix: str) -> bool | None:
    """Whether a hook input is about an MCP tool: its `event`, and a tool named with `prefix` or an
    `mcp_context` (None: it cannot be read, which is a deny). Gemini CLI's answer and every host's
    answer without deciding read it so."""
    if isinstance(hook, str):
        return None
    tool_name, name = hook.get("tool_name"), hook.get("hook_event_name")
    if not isinstance(tool_name, str) or not isinstance(name, str):
        return None
    return name == event and (tool_name.startswith(prefix) or isinstance(hook.get("mcp_context"), dict))


def unreadable(hook: Hook) -> str:
    return hook if isinstance(hook, str) else "the hook input has no tool_name or hook_event_name"
