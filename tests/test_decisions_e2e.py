"""The decision point end to end: a real MCP server, `drift-monitor poll`, `approve`, `serve`, and
Claude Code's PreToolUse hook in both forms (the HTTP hook and the command hook), with the inputs
Claude Code sends, built from its published hook input format rather than from our types."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import (
    WAIT,
    cli,
    free_port,
    http_server,
    migrate_config,
    read_only_flip,
    serving,
    tool,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

TOKEN = "decision-e2e-token-0123456789"
TOKEN_ENV = "TEST_DECISIONS_TOKEN"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def tools(lookup_read_only: bool) -> list[dict[str, Any]]:
    search = tool("search", description="Search customers.", read_only=True)
    return read_only_flip(
        lookup_read_only, "lookup", description="Look a customer up.", destructive=False, others=[search]
    )


def pre_tool_use(tool_name: str) -> dict[str, Any]:
    """A PreToolUse hook input as Claude Code sends it (its documented fields, and one it added later)."""
    return {
        "session_id": "abc123-claude-session",
        "transcript_path": "~/.claude/projects/demo/abc123-claude-session.jsonl",
        "cwd": "~/src/demo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool_name,
        "tool_input": {"customer": "42"},
        "tool_use_id": "toolu_01ABCDEF",
    }


def run(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli(*args), input=stdin, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def hook_run(url: str, tool_name: str, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return run(
        "hook", "claude-code", "--url", url, "--token-env", TOKEN_ENV, *flags,
        env=env, stdin=json.dumps(pre_tool_use(tool_name)),
    )  # fmt: skip


def hook_command(url: str, tool_name: str, env: dict[str, str], *flags: str) -> dict[str, Any]:
    result = hook_run(url, tool_name, env, *flags)
    assert result.returncode == 0, result.stderr
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def decision_of(answer: dict[str, Any]) -> str:
    output: dict[str, Any] = answer["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse"
    return str(output["permissionDecision"])


@pytest.mark.slow
def test_review_approve_flip_and_the_claude_code_hook(tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(lookup_read_only=True)))
    env = {**os.environ, TOKEN_ENV: TOKEN}
    with http_server("fastmcp_server.py", str(tools_file)) as mcp_url:
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "sqlite:///{tmp_path / "monitor.db"}"\npoll_interval = "1h"\n'
            f'api_token_env = "{TOKEN_ENV}"\n\n'
            f'[[servers]]\nname = "demo"\ntransport = "http"\nurl = "{mcp_url}"\napproval = "review"\n'
        )
        migrate_config(config, env)
        polled = run("poll", "--config", str(config), env=env)
        assert polled.returncode == 0, polled.stderr
        with serving(config, env) as running:
            hook_url = f"{running.url}/api/v1/hooks/claude-code"

            def http_hook(tool_name: str) -> dict[str, Any]:
                answer = httpx.post(hook_url, json=pre_tool_use(tool_name), headers=AUTH, timeout=30)
                assert answer.status_code == 200, answer.text
                body: dict[str, Any] = answer.json()
                return body

            assert decision_of(http_hook("mcp__demo__lookup")) == "ask", "review: nothing approved yet"
            assert http_hook("Bash") == {}, "not an MCP tool: no opinion"
            assert http_hook("mcp__elsewhere__lookup") == {}, "a server the monitor does not know"
            unauthorised = httpx.post(hook_url, json=pre_tool_use("mcp__demo__lookup"), timeout=30)
            assert unauthorised.status_code == 200, "a 401 would let Claude Code run the call"
            assert decision_of(unauthorised.json()) == "deny"

            approved = run("approve", "demo", "--config", str(config), "--note", "reviewed", env=env)
            assert approved.returncode == 0, approved.stderr
            assert "approved 2 tool(s) of demo as in version 1" in approved.stdout
            # Approved and unchanged: no opinion, so Claude Code asks as it would without the hook
            # (an explicit allow would skip its prompt: only `hook_allow_approved` opts into that).
            assert http_hook("mcp__demo__lookup") == {}
            assert hook_command(running.url, "mcp__demo__lookup", env) == {}

            tools_file.write_text(json.dumps(tools(lookup_read_only=False)))
            assert run("poll", "--config", str(config), env=env).returncode == 0
            denied = http_hook("mcp__demo__lookup")
            assert decision_of(denied) == "deny"
            assert "read-only-revoked" in denied["hookSpecificOutput"]["permissionDecisionReason"]
            assert hook_command(running.url, "mcp__demo__lookup", env) == denied, (
                "the command prints the same"
            )
            assert http_hook("mcp__demo__search") == {}

            def sessions() -> list[tuple[str, str]]:
                items = httpx.get(f"{running.url}/api/v1/sessions", headers=AUTH, timeout=30).json()["items"]
                return [(s["session_id"], s["client"]) for s in items]

            wait_until("the hook's session among the sessions", sessions, timeout=WAIT, alive=[running])
            assert sessions() == [("abc123-claude-session", "claude-code")]

        stopped = f"http://127.0.0.1:{free_port()}"
        closed = hook_run(stopped, "mcp__demo__lookup", env)
        assert closed.returncode == 2 and "could not be asked" in closed.stderr, "blocked: exit 2"
        assert hook_command(stopped, "mcp__demo__lookup", env, "--fail-open") == {}, "no opinion"
        assert hook_command(stopped, "Read", env) == {}, "no opinion on tools that are not MCP tools"
        garbage = run("hook", "claude-code", "--url", stopped, env=env, stdin="not json")
        assert garbage.returncode == 2 and garbage.stdout == "", "unreadable and unanswered: blocked"
