"""Gemini CLI's `BeforeTool` command hook, docs/approvals.md "Gemini CLI".

MCP tools are `mcp_<server>_<tool>`, and `mcp_context` names the server and the tool as they are
(the flat name is ambiguous when a server name holds `_`), so the context is used when sent. The
answer is deny or ask (the reason goes to the model), or empty for no opinion: Gemini's `allow`
would only go on to its own policy, so an allowed call gets no opinion.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from monitor.approvals.hosts.base import (
    BUSY_REASON,
    Hook,
    HookInput,
    HostAdapter,
    host_reason,
    mcp_call,
    opinion,
    text,
    unreadable,
)
from monitor.approvals.names import exact_name, gemini_name
from monitor.approvals.point import Answer, DecisionPoint, Unmonitored
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind


class GeminiOut(BaseModel):
    """Gemini CLI's hook output: `deny` (the reason goes to the model) or `ask`; empty: no opinion."""

    decision: DecisionKind | None = None
    reason: str | None = None
    systemMessage: str | None = None


def _said(decision: DecisionKind, reason: str) -> GeminiOut:
    return GeminiOut(decision=decision, reason=host_reason(reason), systemMessage=host_reason(reason))


class GeminiCli(HostAdapter):
    host = "gemini-cli"
    path = "/api/v1/hooks/gemini-cli"
    endpoint = "gemini_hook"
    summary = "Gemini CLI BeforeTool hook: deny, ask, or no opinion"
    input: ClassVar = HookInput
    output: ClassVar = GeminiOut

    def answer(self, point: DecisionPoint, hook: Hook) -> GeminiOut:
        mcp = mcp_call(hook, "BeforeTool", "mcp_")
        if mcp is None or isinstance(hook, str):
            return GeminiOut(decision=DecisionKind.DENY, reason=host_reason(unreadable(hook)))
        if not mcp:
            return GeminiOut()
        tool_name, context = hook["tool_name"], hook.get("mcp_context")
        session_id = text(hook.get("session_id"))
        found: Answer | Unmonitored
        if isinstance(context, dict) and text(context.get("server_name")) and text(context.get("tool_name")):
            found = point.decide_for_named_host(
                self.host,
                context["server_name"],
                context["tool_name"],
                normalise=exact_name,
                session_id=session_id,
                client=self.host,
            )
        elif storable(tool_name):
            found = point.decide_for_host(
                self.host,
                tool_name,
                prefix="mcp_",
                separator="_",
                normalise=gemini_name,
                session_id=session_id,
                client=self.host,
            )
        else:
            reason = host_reason("the tool name holds characters no tool can have")
            return GeminiOut(decision=DecisionKind.DENY, reason=reason)
        said = opinion(point, found)
        if said is None or said[0] == DecisionKind.ALLOW:  # Gemini's allow only goes on to its policy
            return GeminiOut()
        return _said(*said)

    def busy(self, hook: Hook, decision: DecisionKind) -> GeminiOut:
        mcp = mcp_call(hook, "BeforeTool", "mcp_")
        if mcp is False:
            return GeminiOut()
        return _said(decision, BUSY_REASON) if mcp else _said(DecisionKind.DENY, unreadable(hook))
