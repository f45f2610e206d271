"""Claude Code's `PreToolUse` hook (HTTP or command hook), docs/approvals.md "Claude Code".

`allow` skips Claude Code's own prompt, so an approved tool gets no opinion (`{}`) unless
`[decisions] hook_allow_approved` opts in; ask and deny are passed on as they are.
"""

from __future__ import annotations

from typing import ClassVar

from monitor.approvals.hosts.base import Hook, HookInput, HostAdapter
from monitor.approvals.hosts.pretooluse import NO_OPINION, HookOut, busy, judge, pre_tool_use
from monitor.approvals.point import DecisionPoint
from monitor.core.states import DecisionKind


class ClaudeCode(HostAdapter):
    host = "claude-code"
    path = "/api/v1/hooks/claude-code"
    endpoint = "claude_code_hook"
    summary = "Claude Code PreToolUse hook: deny, ask, or no opinion (allow only when opted in)"
    input: ClassVar = HookInput
    output: ClassVar = HookOut

    def answer(self, point: DecisionPoint, hook: Hook) -> HookOut:
        said = judge(point, self.host, hook)
        if isinstance(said, HookOut):
            return said
        return NO_OPINION if said is None else pre_tool_use(*said)

    def busy(self, hook: Hook, decision: DecisionKind) -> HookOut:
        return busy(hook, decision)
