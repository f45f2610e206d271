"""The commands of the decision point: approve, revoke, and `hook` (`monitor.approvals.hookcommand`,
which `monitor.cli` runs before loading this parser)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from monitor.approvals import hookcommand
from monitor.console.common import EXIT_OK, CommandError, command_line, config_option, load, open_store

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from monitor.config import Config

T = TypeVar("T")
CALLER = command_line()

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

    hook = commands.add_parser(
        "hook",
        help="a host's command hook (claude-code, codex, gemini-cli): asks a running monitor before each "
        "tool call, stdin to stdout, and blocks the call (exit 2) when it cannot answer",
        add_help=False,
    )
    hook.add_argument("rest", nargs=argparse.REMAINDER)
    hook.set_defaults(run=lambda args: hookcommand.main(args.rest))


def _run_approve(args: argparse.Namespace) -> int:
    from monitor.approvals.service import ApprovalRequest, ApprovalResult, approve
    from monitor.identity.storage import record_event
    from monitor.notify.alerts import Alerting

    request = ApprovalRequest(args.server, args.version, args.tools or None, args.note, not args.keep_alerts)
    config = load(args)

    def approving(session: Session, now: datetime) -> ApprovalResult:
        done = approve(session, request, actor=CALLER.name, now=now, policy=Alerting.from_config(config))
        tools = sorted({a.tool for a in done.approvals if a.tool})
        detail = {"version": done.version, "tools": tools, "resolved_alerts": done.resolved_alerts}
        record_event(session, CALLER, "approval.approve", args.server, at=now, detail=detail)
        return done

    done = _change(config, approving)
    names = sorted(record.tool for record in done.approvals if record.tool)
    told = " and its instructions" if any(record.tool is None for record in done.approvals) else ""
    listed = ", ".join(names)
    print(f"approved {len(names)} tool(s){told} of {args.server} as in version {done.version}: {listed}")
    if done.resolved_alerts:
        print(f"resolved alert(s) {', '.join(f'#{n}' for n in done.resolved_alerts)}")
    return EXIT_OK


def _run_revoke(args: argparse.Namespace) -> int:
    from monitor.approvals.service import revoke
    from monitor.identity.storage import record_event

    def revoking(session: Session, now: datetime) -> None:
        revoke(session, args.server, args.tool, note=args.note, actor=CALLER.name, now=now)
        record_event(session, CALLER, "approval.revoke", args.server, at=now, detail={"tool": args.tool})

    _change(load(args), revoking)
    print(f"revoked the approval of {args.tool!r} on {args.server}: decisions deny it until approved again")
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
