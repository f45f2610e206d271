"""The commands of the decision point: approve, revoke, and `hook claude-code` (a command hook)."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from monitor.cli.common import EXIT_OK, CommandError, config_option, load, open_store

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from monitor.config import Config

T = TypeVar("T")

HOOK_PATH = "/api/v1/hooks/claude-code"


def register(commands: Any) -> None:
    approve = commands.add_parser(
        "approve", help="approve a server's tools as they are in a version (default: all, current version)"
    )
    config_option(approve)
    approve.add_argument("server", metavar="SERVER")
    approve.add_argument("tools", nargs="*", metavar="TOOL", help="tools to approve (default: all)")
    approve.add_argument("--version", type=int, metavar="N", help="the version to approve (default: current)")
    approve.add_argument("--note", default="", help="why: kept with the approval")
    approve.add_argument(
        "--keep-alerts",
        action="store_true",
        help="leave open the alerts the approved changes raised (default: resolve them)",
    )
    approve.set_defaults(run=_run_approve)

    revoke = commands.add_parser("revoke", help="withdraw the approval of one tool")
    config_option(revoke)
    revoke.add_argument("server", metavar="SERVER")
    revoke.add_argument("tool", metavar="TOOL")
    revoke.add_argument("--note", default="", help="why: kept with the revocation")
    revoke.set_defaults(run=_run_revoke)

    hook = commands.add_parser("hook", help="answer a host's hook from a running monitor (stdin to stdout)")
    hosts = hook.add_subparsers(dest="host", required=True, metavar="HOST")
    claude = hosts.add_parser(
        "claude-code",
        help="a Claude Code PreToolUse command hook: deny when the monitor cannot answer, unless --fail-open",
    )
    claude.add_argument("--url", required=True, help="the monitor's base URL, e.g. http://127.0.0.1:8000")
    claude.add_argument(
        "--token-env",
        default="DRIFT_MONITOR_API_TOKEN",
        metavar="NAME",
        help="the environment variable holding the API token (default DRIFT_MONITOR_API_TOKEN)",
    )
    claude.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="default 5")
    claude.add_argument(
        "--fail-open", action="store_true", help="allow the call when the monitor cannot answer"
    )
    claude.set_defaults(run=_run_claude_code_hook)


def _actor() -> str:
    try:
        return f"command line ({getpass.getuser()})"
    except (KeyError, OSError):
        return "command line"


def _run_approve(args: argparse.Namespace) -> int:
    from monitor.approvals.service import ApprovalRequest, approve
    from monitor.notify.alerts import Alerting

    request = ApprovalRequest(args.server, args.version, args.tools or None, args.note, not args.keep_alerts)
    config = load(args)
    done = _change(
        config,
        lambda session, now: approve(
            session, request, actor=_actor(), now=now, policy=Alerting.from_config(config)
        ),
    )
    names = ", ".join(sorted(record.tool for record in done.approvals if record.tool))
    print(f"approved {len(done.approvals)} tool(s) of {args.server} as in version {done.version}: {names}")
    if done.resolved_alerts:
        print(f"resolved alert(s) {', '.join(f'#{n}' for n in done.resolved_alerts)}")
    return EXIT_OK


def _run_revoke(args: argparse.Namespace) -> int:
    from monitor.approvals.service import revoke

    _change(
        load(args),
        lambda session, now: revoke(session, args.server, args.tool, note=args.note, actor=_actor(), now=now),
    )
    print(
        f"revoked the approval of {args.tool!r} on {args.server}: decisions about it ask until approved again"
    )
    return EXIT_OK


def _change(config: Config, change: Callable[[Session, datetime], T]) -> T:
    """Run one change to approvals in its own transaction; a refusal is the command's one-line error."""
    from monitor.approvals.errors import ApprovalError

    store = open_store(config)
    try:
        with store.sessions.begin() as session:
            return change(session, datetime.now(UTC))
    except ApprovalError as exc:
        raise CommandError(str(exc)) from None
    finally:
        store.engine.dispose()


def _hook_output(decision: str, reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }


def _unanswered(args: argparse.Namespace, what: str) -> dict[str, Any]:
    """Fail closed (deny), or open with --fail-open, saying which and why."""
    outcome = "allowed: fail-open" if args.fail_open else "denied: fail-closed"
    return _hook_output(
        "allow" if args.fail_open else "deny", f"drift-monitor at {args.url} {what} ({outcome})"
    )


def _run_claude_code_hook(args: argparse.Namespace) -> int:
    """Claude Code runs this with the hook input on stdin and reads the decision from stdout (exit 0)."""
    fallback = "allow" if args.fail_open else "deny"
    raw = sys.stdin.buffer.read()
    try:
        hook = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        hook = None
    if not isinstance(hook, dict) or not isinstance(hook.get("tool_name"), str):
        reason = "drift-monitor: the hook input is not a Claude Code PreToolUse input"
        print(json.dumps(_hook_output(fallback, reason)))
        return EXIT_OK
    if not hook["tool_name"].startswith("mcp__"):
        print("{}")  # not an MCP tool: no opinion, whether or not the monitor is up
        return EXIT_OK
    url = args.url.rstrip("/")
    if not url.endswith(HOOK_PATH):
        url += HOOK_PATH
    headers = {"Content-Type": "application/json"}
    token = (os.environ.get(args.token_env) or "").strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=raw, headers=headers, method="POST")  # noqa: S310 - a URL the user gave
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:  # noqa: S310
            answer = json.loads(response.read())
        if not isinstance(answer, dict):
            raise ValueError("the answer is not a JSON object")
    except urllib.error.HTTPError as exc:
        answer = _unanswered(args, f"answered HTTP {exc.code}")
    except (OSError, ValueError) as exc:
        answer = _unanswered(args, f"could not be reached ({getattr(exc, 'reason', exc)})")
    print(json.dumps(answer))
    return EXIT_OK
