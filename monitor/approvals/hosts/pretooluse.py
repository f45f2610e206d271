"""The `PreToolUse` hook Claude Code and Codex share: its input names an MCP tool `mcp__<server>__<tool>`,
and its answer is `hookSpecificOutput` with a permission decision, or `{}` for no opinion."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from monitor.approvals.hosts.base import BUSY_REASON, Hook, host_reason, mcp_call, opinion, text, unreadable
from monitor.approvals.names import claude_name
from monitor.approvals.point import Answer, DecisionPoint, Unmonitored
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind


class HookSpecificOutput(BaseModel):
    model_config = ConfigDict(frozen=True)

    hookEventName: Literal["PreToolUse"] = "PreToolUse"
    permissionDecision: DecisionKind
    permissionDecisionReason: str


class HookOut(BaseModel):
    """With an opinion, `hookSpecificOutput`; without one an empty object, so the host's own permission
    rules decide as they would without the hook."""

    model_config = ConfigDict(frozen=True)

    hookSpecificOutput: HookSpecificOutput | None = None


NO_OPINION = HookOut()
"""The answer to most calls (an approved tool, a call of no MCP tool), made once: answers are frozen."""


def pre_tool_use(decision: DecisionKind, reason: str) -> HookOut:
    return HookOut(
        hookSpecificOutput=HookSpecificOutput(
            permissionDecision=decision, permissionDecisionReason=host_reason(reason)
        )
    )


def mcp_tool(point: DecisionPoint, host: str, hook: Hook) -> Answer | Unmonitored | str | None:
    """The decision about a `mcp__<server>__<tool>` call, why the input cannot be judged, or None
    when it is not a `PreToolUse` call of an MCP tool (not the monitor's business)."""
    if isinstance(hook, str):
        return hook
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
        session_id=text(hook.get("session_id")),
        client=host,
    )


def judge(point: DecisionPoint, host: str, hook: Hook) -> HookOut | tuple[DecisionKind, str] | None:
    """The opinion a `PreToolUse` host should hear (`opinion`), or the answer itself when there is
    nothing to judge: no opinion for a call that is not of an MCP tool, a deny for an unreadable one."""
    found = mcp_tool(point, host, hook)
    if found is None:
        return NO_OPINION
    if isinstance(found, str):
        return pre_tool_use(DecisionKind.DENY, found)
    return opinion(point, found)


def busy(hook: Hook, decision: DecisionKind) -> HookOut:
    """`decision` for a call of an MCP tool, a deny for an input that cannot be read, else no opinion."""
    mcp = mcp_call(hook, "PreToolUse", "mcp__")
    if mcp is None:
        return pre_tool_use(DecisionKind.DENY, unreadable(hook))
    return pre_tool_use(decision, BUSY_REASON) if mcp else NO_OPINION
