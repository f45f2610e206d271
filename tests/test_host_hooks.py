"""Codex's and Gemini CLI's hooks, with inputs shaped exactly as those hosts send them (their documented
hook inputs), and answers in the only shapes they act on (docs/approvals.md cites each contract)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from support import tool
from support.gate import READ_ONLY_LOOKUP, WRITING_LOOKUP, Gate, gate_for, http_server

from monitor.config import DecisionSettings
from monitor.store import Store

SEARCH = tool("search", description="Search records.", read_only=True)


def codex_input(tool_name: str) -> dict[str, Any]:
    """A Codex PreToolUse hook input (codex-rs/hooks: command_input_json)."""
    return {
        "session_id": "0199a3f2-codex",
        "turn_id": "turn-7",
        "transcript_path": None,
        "cwd": "/src/p",
        "hook_event_name": "PreToolUse",
        "model": "gpt-5-codex",
        "permission_mode": "default",
        "tool_name": tool_name,
        "tool_input": {"q": "42"},
        "tool_use_id": "call_01",
    }


def gemini_input(tool_name: str, server: str | None, tool_in_server: str | None) -> dict[str, Any]:
    """A Gemini CLI BeforeTool hook input (packages/core/src/hooks/types.ts: BeforeToolInput)."""
    hook: dict[str, Any] = {
        "session_id": "gemini-session-3",
        "transcript_path": "/home/u/.gemini/tmp/chats/session.json",
        "cwd": "/src/p",
        "hook_event_name": "BeforeTool",
        "timestamp": "2026-06-01T12:00:00.000Z",
        "tool_name": tool_name,
        "tool_input": {"q": "42"},
    }
    if server is not None:
        hook["mcp_context"] = {
            "server_name": server,
            "tool_name": tool_in_server,
            "url": "http://127.0.0.1:9/mcp",
        }
    return hook


def ask(gate: Gate, host: str, hook: dict[str, Any]) -> dict[str, Any]:
    response = gate.client.post(f"/api/v1/hooks/{host}", json=hook)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.fixture
def changed(store: Store) -> Iterator[Gate]:
    """Server `demo` (Gemini calls it `my_demo`): lookup lost its read-only hint, search unchanged, and
    `fresh` a tool added since (not approved: ask)."""
    for gate in gate_for(store, [http_server("demo", aliases=["my_demo"])]):
        gate.poll("demo", [READ_ONLY_LOOKUP, SEARCH])
        gate.clock[0] += timedelta(seconds=1)
        gate.poll("demo", [WRITING_LOOKUP, SEARCH, tool("fresh", read_only=True)])
        yield gate


def test_codex_gets_a_deny_or_no_opinion_never_an_ask_it_would_run(changed: Gate) -> None:
    denied = ask(changed, "codex", codex_input("mcp__demo__lookup"))
    output = denied["hookSpecificOutput"]
    assert (
        output["permissionDecision"] == "deny" and "read-only-revoked" in output["permissionDecisionReason"]
    )
    asked = ask(changed, "codex", codex_input("mcp__demo__fresh"))["hookSpecificOutput"]
    assert asked["permissionDecision"] == "deny", "Codex runs a tool whose hook says ask"
    assert "a person must approve this call first" in asked["permissionDecisionReason"]
    assert ask(changed, "codex", codex_input("mcp__demo__search")) == {}, "approved: no opinion"
    assert ask(changed, "codex", codex_input("shell")) == {}, "not an MCP tool"


def test_gemini_cli_uses_mcp_context_and_gets_deny_ask_or_no_opinion(changed: Gate) -> None:
    denied = ask(changed, "gemini-cli", gemini_input("mcp_my_demo_lookup", "my_demo", "lookup"))
    assert denied["decision"] == "deny" and "read-only-revoked" in denied["reason"]
    asked = ask(changed, "gemini-cli", gemini_input("mcp_my_demo_fresh", "my_demo", "fresh"))
    assert asked["decision"] == "ask" and asked["systemMessage"].startswith("drift-monitor: ")
    assert ask(changed, "gemini-cli", gemini_input("mcp_my_demo_search", "my_demo", "search")) == {}
    flat = ask(changed, "gemini-cli", gemini_input("mcp_demo_lookup", None, None))
    assert flat["decision"] == "deny", "without mcp_context, the flat name, longest match"
    assert ask(changed, "gemini-cli", gemini_input("run_shell_command", None, None)) == {}
    assert ask(changed, "gemini-cli", {**gemini_input("x", None, None), "hook_event_name": "AfterTool"}) == {}


def test_gemini_and_codex_answer_unmonitored_and_unreadable_inputs_as_configured(store: Store) -> None:
    for gate in gate_for(store, [http_server("demo")], DecisionSettings(unmonitored="ask")):
        gemini = ask(gate, "gemini-cli", gemini_input("mcp_other_t", "other", "t"))
        assert gemini["decision"] == "ask"
        codex = ask(gate, "codex", codex_input("mcp__other__t"))["hookSpecificOutput"]
        assert codex["permissionDecision"] == "deny"
        for host in ("gemini-cli", "codex"):
            broken = gate.client.post(
                f"/api/v1/hooks/{host}", content=b"{", headers={"content-type": "application/json"}
            )
            assert broken.status_code == 200 and "deny" in broken.text, (host, broken.text)
