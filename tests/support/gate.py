"""A monitor and the three ways a host asks it before a call, for the decision point's tests: the
decision API, Claude Code's HTTP hook and ToolHive's PDP, with inputs shaped as those hosts send them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from fastapi import FastAPI
from fastapi.testclient import TestClient

from monitor.approvals.point import DecisionPoint
from monitor.config import Config, DecisionSettings, MonitorSettings, ServerConfig
from monitor.core.findings import Severity
from monitor.store import PollOutcome, Store
from monitor.store.registration import sync_servers
from support.polls import record_poll
from support.tools import tool
from support.web import TOKEN_ENV, web_client

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
READ_ONLY_LOOKUP = tool("lookup", description="Look a record up.", read_only=True)
WRITING_LOOKUP = tool("lookup", description="Look a record up.", read_only=False, destructive=True)


def pre_tool_use(tool_name: str, **extra: Any) -> dict[str, Any]:
    """A PreToolUse hook input as Claude Code documents it."""
    return {
        "session_id": "claude-session-1",
        "transcript_path": "~/.claude/projects/p/claude-session-1.jsonl",
        "cwd": "~/src/p",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool_name,
        "tool_input": {"q": "42"},
        "tool_use_id": "toolu_01",
        **extra,
    }


def porc(server: str, tool_name: str) -> dict[str, Any]:
    """A ToolHive HTTP PDP request (PORC)."""
    return {
        "principal": {"sub": "dev@example.com"},
        "operation": "mcp:tool:call",
        "resource": f"mrn:mcp:{server}:tool:{tool_name}",
        "context": {},
    }


@dataclass
class Gate:
    """A monitor with one or more servers, its app on a clock the test moves, and the three ways a
    host asks: the decision API, Claude Code's HTTP hook and ToolHive's PDP."""

    store: Store
    client: TestClient
    ids: dict[str, int]
    clock: list[datetime] = field(default_factory=lambda: [T0])

    def warmed(self) -> None:
        """Waits until the app has built every server's decision view (`DecisionPoint.warm`, on a
        thread of its own from its start), so what a test does next never races it."""
        point: DecisionPoint = cast(FastAPI, self.client.app).state.decision_point
        assert point.warmed.wait(30), "the decision views were not built within 30 s"

    def poll(self, server: str, tools: list[dict[str, Any]]) -> PollOutcome:
        return record_poll(self.store, self.ids[server], tools, self.clock[0])

    def decide(self, server: str, tool_name: str) -> dict[str, Any]:
        response = self.client.post("/api/v1/decisions", json={"server": server, "tool": tool_name})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def hook(self, tool_name: str, **extra: Any) -> dict[str, Any]:
        response = self.client.post("/api/v1/hooks/claude-code", json=pre_tool_use(tool_name, **extra))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def toolhive(self, server: str, tool_name: str) -> bool:
        response = self.client.post("/api/v1/pdp/toolhive/decision", json=porc(server, tool_name))
        assert response.status_code == 200, response.text
        return bool(response.json()["allow"])


def permission(answer: dict[str, Any]) -> str | None:
    """A Claude Code hook answer's decision; None for no opinion (`{}`)."""
    if answer == {}:
        return None
    output = answer["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse" and output["permissionDecisionReason"].startswith(
        "drift-monitor: "
    )
    return str(output["permissionDecision"])


def gate_for(
    store: Store,
    servers: list[ServerConfig],
    decisions: DecisionSettings | None = None,
    poll_now: Any = None,
    **monitor: Any,
) -> Iterator[Gate]:
    config = Config(
        monitor=MonitorSettings(api_token_env=TOKEN_ENV, alert_min_severity=Severity.HIGH, **monitor),
        servers=servers,
        decisions=decisions or DecisionSettings(),
        source="test",
    )
    ids = sync_servers(store, servers, T0)
    clock = [T0]
    with web_client(store, config, clock=lambda: clock[0], poll_now=poll_now) as client:
        gate = Gate(store, client, ids, clock)
        gate.warmed()
        yield gate


def http_server(name: str, **fields: Any) -> ServerConfig:
    return ServerConfig(name=name, transport="http", url="http://127.0.0.1:9/mcp", **fields)
