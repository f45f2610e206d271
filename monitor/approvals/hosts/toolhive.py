"""ToolHive's HTTP policy decision point (httpv1), docs/integrations.md "ToolHive".

ToolHive sends a PORC (principal, operation `mcp:tool:call`, resource `mrn:mcp:<server>:tool:<name>`)
and takes `{"allow": bool}`. It has no prompt, so only an allow lets a call run: `ask` is not allowed
until a person approves the tool, and an unmonitored server is allowed only under
`unmonitored = "none"`. Operations other than tool calls are not the monitor's business: allowed.

ToolHive's PDP client sends no headers of its own, but Go sends the userinfo of its URL as Basic
authentication (`http://drift-monitor:<token>@host/...`), so the token may come as its password
(`monitor.identity.callers` reads both).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from monitor.approvals.hosts.base import Hook, HostAdapter, text
from monitor.approvals.names import exact_name
from monitor.approvals.point import DecisionPoint, Unmonitored
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind


class PorcIn(BaseModel):
    """ToolHive's PORC: principal, operation (`mcp:tool:call`), resource (`mrn:mcp:<server>:tool:<name>`)."""

    model_config = ConfigDict(extra="allow")

    principal: dict[str, Any] = Field(default_factory=dict)
    operation: str = Field(max_length=200)
    resource: str = Field(max_length=2000)
    context: dict[str, Any] = Field(default_factory=dict)


class PdpOut(BaseModel):
    allow: bool


class ToolHive(HostAdapter):
    host = "toolhive"
    path = "/api/v1/pdp/toolhive/decision"
    endpoint = "toolhive_decision"
    summary = "ToolHive HTTP PDP (httpv1): the decision as allow true/false"
    input: ClassVar = PorcIn
    output: ClassVar = PdpOut
    basic_auth = True

    def answer(self, point: DecisionPoint, hook: Hook) -> PdpOut:
        if isinstance(hook, str):
            return PdpOut(allow=False)
        operation, resource = hook.get("operation"), hook.get("resource")
        if not isinstance(operation, str) or not isinstance(resource, str):
            return PdpOut(allow=False)
        if operation != "mcp:tool:call":
            return PdpOut(allow=True)
        prefix, _, rest = resource.partition("mrn:mcp:")
        host_name, _, feature_and_tool = rest.partition(":")
        feature, _, tool = feature_and_tool.partition(":")
        if prefix or feature != "tool" or not host_name or not tool or not storable(resource):
            return PdpOut(allow=False)
        principal = hook.get("principal")
        subject = text(principal.get("sub")) if isinstance(principal, dict) else None
        found = point.decide_for_named_host(
            self.host,
            host_name,
            tool,
            normalise=exact_name,
            client=f"toolhive ({subject})" if subject else "toolhive",
        )
        if isinstance(found, Unmonitored):
            return PdpOut(allow=point.config.decisions.unmonitored == "none")
        return PdpOut(allow=found.verdict.decision == DecisionKind.ALLOW)

    def busy(self, hook: Hook, decision: DecisionKind) -> PdpOut:
        """Not even operations other than tool calls: the caller was not identified."""
        return PdpOut(allow=False)
