"""`drift-monitor hook HOST --url URL`: a host's command hook, which answers fast and fails closed.

Claude Code, Codex and Gemini CLI run a command hook before each tool call, with the hook input on
stdin, and read the answer from stdout. This command passes the input to the monitor's endpoint for
that host (`/api/v1/hooks/<host>`) and prints its answer. Every way it can fail (the monitor down or
slow, an answer that is not HTTP or is cut short, an error status, a bad token, a crash of this
command) exits 2 with the reason on stderr, which all three hosts read as "block this call": an
exit 1, a traceback or an empty answer would let the call run. `--fail-open` prints `{}` (no
opinion) instead.

It runs before every tool call, so it imports only the standard library's HTTP client and reads its
few options by hand: Python's start-up plus this module is a few tens of milliseconds, and none of
the monitor's own dependencies load (`monitor.cli` dispatches here before importing anything else).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from urllib.parse import urlsplit

ENDPOINTS = {
    "claude-code": "/api/v1/hooks/claude-code",
    "codex": "/api/v1/hooks/codex",
    "gemini-cli": "/api/v1/hooks/gemini-cli",
}
USAGE = (
    "usage: drift-monitor hook {claude-code,codex,gemini-cli} --url URL [--token-env NAME] "
    "[--timeout SECONDS] [--fail-open]"
)
BLOCK = 2
"""The exit code every supported host reads as "block this call", with stderr as the reason."""
SHORTCUT_BYTES = 65536
"""Inputs up to this size are read here first, so a call that is not an MCP tool's is let through
with no opinion even while the monitor is down; larger ones go to the monitor as they are."""


class Options:
    def __init__(self, argv: Sequence[str]) -> None:
        args = list(argv)
        if not args:
            raise ValueError(USAGE)
        self.host = args.pop(0)
        if self.host not in ENDPOINTS:
            raise ValueError(f"unknown host {self.host!r} (one of {', '.join(ENDPOINTS)})")
        self.url = ""
        self.token_env = "DRIFT_MONITOR_API_TOKEN"  # noqa: S105 - a variable's name
        self.timeout = 5.0
        self.fail_open = False
        while args:
            option = args.pop(0)
            name, equals, inline = option.partition("=")
            if name == "--fail-open" and not equals:
                self.fail_open = True
                continue
            if name not in ("--url", "--token-env", "--timeout"):
                raise ValueError(f"unknown option {option!r}")
            if not equals and not args:
                raise ValueError(f"{name} needs a value")
            value = inline if equals else args.pop(0)
            if name == "--url":
                self.url = value
            elif name == "--token-env":
                self.token_env = value
            else:
                self.timeout = float(value)
        if not self.url:
            raise ValueError("--url is required (the monitor's base URL, e.g. http://127.0.0.1:8000)")


def main(argv: Sequence[str]) -> int:
    """Run the hook; the exit code the host reads (0 with the answer on stdout, or 2 to block)."""
    if list(argv[:1]) in (["-h"], ["--help"]):
        print(f"{USAGE}\n\nAsks a running drift-monitor before each tool call (stdin to stdout).")
        return 0
    fail_open = "--fail-open" in argv
    try:
        options = Options(argv)
        return _ask(options, sys.stdin.buffer.read())
    except BaseException as exc:  # every failure, a crash included, must block the call
        return _unanswered(fail_open, f"the hook failed: {type(exc).__name__}: {exc}")


def _ask(options: Options, raw: bytes) -> int:
    if len(raw) <= SHORTCUT_BYTES and not _mcp_call(raw):
        print("{}")  # not an MCP tool: no opinion, whether or not the monitor is up
        return 0
    endpoint = options.url.rstrip("/")
    if not endpoint.endswith(ENDPOINTS[options.host]):
        endpoint += ENDPOINTS[options.host]
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url {options.url!r} is not an http(s) URL")
    connection_class = HTTPSConnection if parts.scheme == "https" else HTTPConnection
    connection = connection_class(parts.hostname, parts.port, timeout=options.timeout)
    headers = {"Content-Type": "application/json", "Connection": "close"}
    token = (os.environ.get(options.token_env) or "").strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    where = f"drift-monitor at {options.url}"
    try:
        connection.request("POST", parts.path or "/", body=raw, headers=headers)
        response = connection.getresponse()
        body = response.read()
    except (OSError, ValueError, HTTPException) as exc:  # not HTTP, cut short, refused, too slow
        return _unanswered(options.fail_open, f"{where} could not be asked: {type(exc).__name__}: {exc}")
    finally:
        connection.close()
    if response.status != 200:
        detail = body[:300].decode("utf-8", "replace").strip()
        return _unanswered(options.fail_open, f"{where} answered HTTP {response.status}: {detail}")
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return _unanswered(options.fail_open, f"{where} answered something that is not a JSON object")
    print(json.dumps(answer))
    return 0


def _mcp_call(raw: bytes) -> bool:
    """Whether a small input may be an MCP tool's call (when in doubt, the monitor decides)."""
    try:
        hook = json.loads(raw)
    except (ValueError, RecursionError):
        return True
    if not isinstance(hook, dict):
        return True
    name = hook.get("tool_name")
    return not isinstance(name, str) or name.startswith("mcp_") or "mcp_context" in hook


def _unanswered(fail_open: bool, reason: str) -> int:
    """Block the call (exit 2, the reason on stderr), or with `--fail-open` give no opinion."""
    if fail_open:
        print(f"drift-monitor: {reason} (no opinion: --fail-open)", file=sys.stderr)
        print("{}")
        return 0
    print(f"drift-monitor: {reason}; the call is blocked (the hook fails closed)", file=sys.stderr)
    return BLOCK
