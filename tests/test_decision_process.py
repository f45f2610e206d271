"""`serve` answering decisions from processes of their own on `[decisions] listen`
(monitor/service/decisions.py, docs/approvals.md "Under load"): real `serve` processes, a real MCP
server, Claude Code hook calls over loopback. The decision port answers as the main port does, serves
nothing but decisions, replaces a process that dies without losing the call waiting for it, and no
decision process outlives `serve`, however `serve` ends."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from support import WAIT, free_port, http_server, migrate_config, read_only_flip, run_cli, serving, wait_until
from support.gate import pre_tool_use
from support.service import Service

from monitor.config import DecisionSettings

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

TOKEN = "decision-process-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STARTED = re.compile(r"answering decisions on http://127\.0\.0\.1:(\d+) \(process (\d+)\)")


def hook(base: str, tool: str, *, headers: dict[str, str] = AUTH) -> tuple[int, Any]:
    answer = httpx.post(
        f"{base}/api/v1/hooks/claude-code", json=pre_tool_use(tool), headers=headers, timeout=30
    )
    return answer.status_code, answer.json()


def decision_pids(service: Service) -> list[int]:
    """Every decision process `serve` has started so far, oldest first (its log says each)."""
    return [int(match.group(2)) for line in service.lines if (match := STARTED.search(line))]


def running(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie's parent has not reaped it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextmanager
def decisions_serve(
    tmp_path: Path, database_url: str, processes: int, *, interval: str = "1s", decisions: str = ""
) -> Iterator[tuple[Service, str]]:
    """`serve` polling one real server (`tenants`, `purge_tenant` read-only) every `interval`, with
    `processes` decision processes on a port of their own (and the `decisions` settings); yields it
    and the decision port's base URL once every decision process has started and, on a short
    interval, the first poll is in."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(read_only_flip(True)))
    env = {**os.environ, "TEST_DECISIONS_TOKEN": TOKEN}
    port = free_port()
    with http_server("fastmcp_server.py", str(tools_file)) as mcp_url:
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{interval}"\n'
            'poll_timeout = "10s"\napi_token_env = "TEST_DECISIONS_TOKEN"\n\n'
            f'[decisions]\nlisten = "127.0.0.1:{port}"\nprocesses = {processes}\nunmonitored = "deny"\n'
            f"{decisions}\n"
            f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n'
        )
        migrate_config(config, env)
        with serving(config, env) as service:
            if interval == "1s":
                wait_until("the first poll", lambda: version(service.url) >= 1, timeout=WAIT, alive=[service])
            wait_until(
                "the decision processes", lambda: len(decision_pids(service)) == processes, alive=[service]
            )
            yield service, f"http://127.0.0.1:{port}"


def sqlite(tmp_path: Path) -> str:
    """These tests are about processes, which are the same on either database: they run on SQLite
    alone (what a decision reads is tested on both, in-process: tests/test_gate.py and others)."""
    return f"sqlite:///{tmp_path / 'monitor.db'}"


def version(base: str) -> int:
    answer = httpx.get(f"{base}/api/v1/servers/tenants", headers=AUTH, timeout=30)
    current = answer.json().get("current") or {}
    return int(current.get("version") or 0)


def decisions_counted(base: str) -> float:
    text = httpx.get(f"{base}/metrics", headers=AUTH, timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name == "drift_monitor_decision_duration_seconds":
            return sum(sample.value for sample in family.samples if sample.name.endswith("_count"))
    raise AssertionError("no drift_monitor_decision_duration_seconds in /metrics")


@pytest.mark.slow
def test_the_decision_port_answers_as_the_main_port_does_and_serves_nothing_else(tmp_path: Path) -> None:
    with decisions_serve(tmp_path, sqlite(tmp_path), processes=2) as (service, decisions):
        calls = [
            "mcp__tenants__purge_tenant",
            "mcp__tenants__lookup",
            "mcp__tenants__gone",
            "mcp__elsewhere__x",
        ]
        for tool in calls:
            assert hook(decisions, tool) == hook(service.url, tool), tool
        assert hook(decisions, "mcp__tenants__purge_tenant") == (200, {})  # trusted: no opinion
        status, unknown = hook(decisions, "mcp__elsewhere__x")
        assert status == 200 and unknown["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert hook(decisions, "mcp__tenants__lookup", headers={}) == hook(
            service.url, "mcp__tenants__lookup", headers={}
        )

        assert httpx.get(f"{decisions}/healthz", timeout=30).json() == {"status": "ok"}
        paths = (
            "/",
            "/metrics",
            "/servers/tenants",
            "/api/v1/servers",
            "/api/v1/approvals",
            "/static/style.css",
        )
        for path in paths:
            assert httpx.get(f"{decisions}{path}", headers=AUTH, timeout=30).status_code == 404, path
        answer = httpx.post(
            f"{decisions}/api/v1/decisions",
            json={"server": "tenants", "tool": "purge_tenant"},
            headers=AUTH,
            timeout=30,
        )
        assert answer.status_code == 200 and answer.json()["decision"] == "allow"
        # the main port's /metrics counts the decision processes' decisions with its own, once each:
        # 4 there, 4 + 2 hook calls and 1 API call here (the call without a token is refused undecided)
        counted = wait_until("the reports", lambda: decisions_counted(service.url) >= 11, alive=[service])
        assert counted and decisions_counted(service.url) == 11

        # they decide from the database the main process's scheduler writes
        (tmp_path / "tools.json").write_text(json.dumps(read_only_flip(False)))
        wait_until("the change", lambda: version(service.url) >= 2, timeout=WAIT, alive=[service])
        status, denied = hook(decisions, "mcp__tenants__purge_tenant")
        assert status == 200 and denied["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert "read-only-revoked" in denied["hookSpecificOutput"]["permissionDecisionReason"]
        assert hook(decisions, "mcp__tenants__lookup") == (200, {})

        pids = decision_pids(service)
        assert service.stop() == 0
    wait_until("the decision processes to end with serve", lambda: not any(map(running, pids)), timeout=WAIT)


@pytest.mark.slow
def test_a_decision_process_that_dies_is_replaced_and_the_call_waiting_is_answered(tmp_path: Path) -> None:
    with decisions_serve(tmp_path, sqlite(tmp_path), processes=1) as (service, decisions):
        (only,) = decision_pids(service)
        for _ in range(3):
            assert hook(decisions, "mcp__tenants__lookup") == (200, {})
        wait_until("the report", lambda: decisions_counted(service.url) == 3, alive=[service])
        os.kill(only, signal.SIGKILL)
        wait_until("the process to be gone", lambda: not running(only), alive=[service])
        # no process accepts on the port now: the call waits in the listener's queue for the next
        status, answer = hook(decisions, "mcp__elsewhere__x")
        assert status == 200 and answer["hookSpecificOutput"]["permissionDecision"] == "deny"
        pids = decision_pids(service)
        assert len(pids) == 2 and pids[0] == only
        assert any("decision process" in line and "exit code -9" in line for line in service.lines)
        # what the ended process counted is counted still: the count goes on from 3, not from 0
        wait_until("the new process's report", lambda: decisions_counted(service.url) == 4, alive=[service])
        assert service.stop() == 0
    assert not running(pids[1])


@pytest.mark.slow
def test_decision_processes_end_when_serve_is_killed(tmp_path: Path) -> None:
    """A `serve` killed outright cannot stop them: they notice it is gone, end, and free the port."""
    with decisions_serve(tmp_path, sqlite(tmp_path), processes=2) as (service, decisions):
        pids = decision_pids(service)
        service.stop(signal.SIGKILL)
        wait_until(
            "the orphaned decision processes to end", lambda: not any(map(running, pids)), timeout=WAIT
        )
        port = int(decisions.rsplit(":", 1)[1])
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))  # no process holds the port any more


@pytest.mark.slow
def test_a_decision_process_refreshes_a_listing_as_refresh_on_decision_says(tmp_path: Path) -> None:
    """With an interval of an hour the scheduler polls `tenants` at most once in the test, at a random
    moment of the hour: the second version, after the flip, comes from the decision process's
    own poll before its decision (`refresh_on_decision`), and that poll takes the one path to alerts."""
    refresh = 'refresh_on_decision = "1s"\nrefresh_wait = "20s"\n'
    with decisions_serve(tmp_path, sqlite(tmp_path), 1, interval="1h", decisions=refresh) as (
        service,
        decisions,
    ):
        assert hook(decisions, "mcp__tenants__purge_tenant") == (200, {})
        assert version(service.url) == 1
        (tmp_path / "tools.json").write_text(json.dumps(read_only_flip(False)))
        wait_until(
            "the refresh interval to pass", lambda: hook(decisions, "mcp__tenants__purge_tenant")[1] != {}
        )
        status, denied = hook(decisions, "mcp__tenants__purge_tenant")
        assert status == 200 and "read-only-revoked" in json.dumps(denied)
        assert version(service.url) == 2
        alerts = httpx.get(f"{service.url}/api/v1/alerts", headers=AUTH, timeout=30).json()
        assert "read-only-revoked" in json.dumps(alerts)


@pytest.mark.parametrize("listen", ["8001", "127.0.0.1:", "127.0.0.1:http", "[::1]:70000", ":8001"])
def test_the_decision_port_is_host_and_port(listen: str) -> None:
    with pytest.raises(ValidationError, match="HOST:PORT"):
        DecisionSettings(listen=listen)
    assert DecisionSettings(listen="[::1]:8001").listen == "[::1]:8001"


def test_serve_says_so_in_one_line_when_the_decision_port_is_taken(tmp_path: Path) -> None:
    env = {**os.environ, "TEST_DECISIONS_TOKEN": TOKEN}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{sqlite(tmp_path)}"\napi_token_env = "TEST_DECISIONS_TOKEN"\n\n'
            f'[decisions]\nlisten = "127.0.0.1:{port}"\n'
        )
        migrate_config(config, env)
        result = run_cli("serve", "--config", str(config), "--port", "0", env=env)
    assert result.returncode == 2  # as for the main port (tests/test_operations.py)
    assert result.stderr.strip().splitlines()[-1] == (
        f"drift-monitor: cannot listen on 127.0.0.1:{port}: the port is already in use"
    )
    assert "Traceback" not in result.stderr
