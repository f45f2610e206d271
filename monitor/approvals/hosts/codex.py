"""Codex's `PreToolUse` command hook, docs/approvals.md "Codex".

Codex takes a deny (with a reason) or no opinion: an `allow` or `ask` from a hook is an error there,
and Codex then runs the tool. So `ask` is answered as a deny that says a person must approve the
tool first, and `allow` as no opinion.
"""

from __future__ import annotations

from typing import ClassVar

from monitor.approvals.hosts.base import Hook, HookInput, HostAdapter
from monitor.approvals.hosts.pretooluse import NO_OPINION, HookOut, busy, judge, pre_tool_use
from monitor.approvals.point import DecisionPoint
from monitor.core.states import DecisionKind


class Codex(HostAdapter):
    host = "codex"
    path = "/api/v1/hooks/codex"
    endpoint = "codex_hook"
    summary = "Codex PreToolUse hook: deny (an ask is a deny) or no opinion"
    input: ClassVar = HookInput
    output: ClassVar = HookOut

    def answer(self, point: DecisionPoint, hook: Hook) -> HookOut:
        said = judge(point, self.host, hook)
        if isinstance(said, HookOut):
            return said
        if said is None or said[0] == DecisionKind.ALLOW:
            return NO_OPINION
        decision, reason = said
        if decision == DecisionKind.ASK:
            reason = f"a person must approve this call first (Codex hooks cannot ask): {reason}"
        return pre_tool_use(DecisionKind.DENY, reason)

    def busy(self, hook: Hook, decision: DecisionKind) -> HookOut:
        """Codex takes only a deny."""
        return busy(hook, DecisionKind.DENY)
