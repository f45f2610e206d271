"""`drift-monitor hook HOST --url URL`, the command hook: it blocks the call (exit 2, the reason on
stderr) on every failure, a crash included, since Claude Code, Codex and Gemini CLI run the tool when a
command hook exits 1, prints a traceback or prints nothing; and it loads none of the monitor's own
dependencies, so it starts fast. The "monitor" here is a loopback server that fails in each way."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest
from support import cli, free_port

HOOK_INPUT = json.dumps(
    {
        "session_id": "s",
        "transcript_path": "t.jsonl",
        "cwd": ".",
        "hook_event_name": "PreToolUse",
        "tool_name": "mcp__demo__lookup",
        "tool_input": {"q": 1},
        "tool_use_id": "toolu_1",
    }
)
DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "drift-monitor: no",
    }
}

Reply = Callable[[socket.socket, bytes], None]


def http(status: int, body: bytes, *, length: int | None = None) -> Reply:
    def reply(connection: socket.socket, _request: bytes) -> None:
        size = len(body) if length is None else length
        head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
        connection.sendall(head.encode() + body)

    return reply


def raw(data: bytes) -> Reply:
    def reply(connection: socket.socket, _request: bytes) -> None:
        connection.sendall(data)

    return reply


def silent(connection: socket.socket, _request: bytes) -> None:
    connection.recv(1)  # never answers; the hook's timeout ends it


@contextmanager
def monitor(reply: Reply) -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server answering every connection with `reply`, and the requests it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(10)
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    request += chunk
                head, _, body = request.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(body) < length:
                    body += connection.recv(65536)
                seen.append(request[: len(head) + 4] + body)
                with suppress(OSError):
                    reply(connection, request)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def hook(
    url: str, *flags: str, stdin: str = HOOK_INPUT, host: str = "claude-code"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli("hook", host, "--url", url, "--timeout", "3", *flags),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"DRIFT_MONITOR_API_TOKEN": "t0ken", "PATH": "/usr/bin:/bin"},
    )


def test_a_real_answer_is_printed_as_it_came() -> None:
    with monitor(http(200, json.dumps(DENY).encode())) as (url, seen):
        result = hook(url)
    assert result.returncode == 0 and json.loads(result.stdout) == DENY, result.stderr
    request = seen[0]
    assert request.startswith(b"POST /api/v1/hooks/claude-code HTTP/1.1")
    assert b"Authorization: Bearer t0ken" in request and request.endswith(HOOK_INPUT.encode())


@pytest.mark.parametrize(
    ("why", "reply", "said"),
    [
        ("not HTTP", raw(b"SSH-2.0-OpenSSH_9.2\r\n"), "could not be asked"),
        ("cut short", http(200, b'{"hookSpecific', length=400), "could not be asked"),
        ("closed at once", raw(b""), "could not be asked"),
        ("an error status", http(500, b"internal error"), "answered HTTP 500"),
        ("a bad token", http(401, b'{"detail": "missing or wrong bearer token"}'), "answered HTTP 401"),
        ("not JSON", http(200, b"<html>proxy login</html>"), "not a JSON object"),
        ("not an object", http(200, b"[]"), "not a JSON object"),
        ("no answer in time", silent, "could not be asked"),
    ],
)
def test_every_failure_blocks_the_call(why: str, reply: Reply, said: str) -> None:
    with monitor(reply) as (url, _seen):
        result = hook(url)
    assert result.returncode == 2, (why, result.returncode, result.stdout, result.stderr)
    assert said in result.stderr and "blocked" in result.stderr, (why, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == "", why


def test_nothing_listening_bad_options_and_a_crash_block_too() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    assert hook(nowhere).returncode == 2
    assert hook("ftp://example/").returncode == 2
    crash = subprocess.run(
        cli("hook", "claude-code", "--url", nowhere, "--timeout", "soon"),
        input=HOOK_INPUT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert crash.returncode == 2 and "the hook failed: ValueError" in crash.stderr
    unknown = subprocess.run(
        cli("hook", "cursor", "--url", nowhere), input="{}", capture_output=True, text=True
    )
    assert unknown.returncode == 2 and "unknown host 'cursor'" in unknown.stderr


def test_fail_open_is_no_opinion_and_non_mcp_tools_need_no_monitor() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    opened = hook(nowhere, "--fail-open")
    assert opened.returncode == 0 and opened.stdout.strip() == "{}", "no opinion, never allow"
    bash = json.dumps({**json.loads(HOOK_INPUT), "tool_name": "Bash"})
    assert hook(nowhere, stdin=bash).stdout.strip() == "{}"
    gemini = json.dumps({"hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "tool_input": {}})
    assert hook(nowhere, stdin=gemini, host="gemini-cli").stdout.strip() == "{}"
    unreadable = hook(nowhere, stdin="not json")
    assert unreadable.returncode == 2, "an input it cannot read goes to the monitor, which is not there"


def test_each_host_is_sent_to_its_own_endpoint() -> None:
    for host in ("claude-code", "codex", "gemini-cli"):
        with monitor(http(200, b"{}")) as (url, seen):
            assert hook(url, host=host).returncode == 0
        assert seen[0].startswith(f"POST /api/v1/hooks/{host} ".encode())


def test_the_hook_loads_none_of_the_monitors_dependencies() -> None:
    """What keeps it fast (docs/approvals.md gives the figures): it imports the standard library only."""
    with monitor(http(200, b"{}")) as (url, _seen):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "monitor.cli", "hook", "claude-code", "--url", url],
            input=HOOK_INPUT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    imported = {
        line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    }
    heavy = {
        name
        for name in imported
        if name.split(".")[0] in {"pydantic", "sqlalchemy", "fastapi", "mcp", "httpx"}
    }
    assert heavy == set(), heavy
    assert {name for name in imported if name.startswith("monitor")} == {
        "monitor",
        "monitor.cli",
        "monitor.approvals",
        "monitor.approvals.hookcommand",
    }
