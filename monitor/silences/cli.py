"""`drift-monitor silence add | list | expire`: the same silences as the API and the dashboard."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from monitor.console.common import EXIT_OK, CommandError, command_line, config_option, load, open_store
from monitor.core.text import make_visible
from monitor.core.times import utc_text

if TYPE_CHECKING:
    from monitor.store.records import SilenceRecord


def register(commands: Any) -> None:
    silence = commands.add_parser("silence", help="mute findings by server, tool and/or rule until a time")
    actions = silence.add_subparsers(dest="action", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="create a silence (matching findings are stored, open no alert)")
    config_option(add)
    add.add_argument("--server", help="the server's name (default: any server)")
    add.add_argument("--tool", help="the tool's name (default: any tool)")
    add.add_argument("--rule", help="the rule id, e.g. description-changed (default: any rule)")
    until = add.add_mutually_exclusive_group(required=True)
    until.add_argument("--for", dest="duration", metavar="DURATION", help="how long, e.g. 2h or 30m")
    until.add_argument("--until", metavar="TIME", help="until this ISO 8601 instant (UTC if no offset)")
    add.add_argument("--by", default=None, help="for whom, kept in the reason (the actor is the login name)")
    add.add_argument("--reason", required=True, help="why, for whoever sees the muted findings")
    add.set_defaults(run=_run_add)

    listing = actions.add_parser("list", help="active silences (with --all, ended ones too)")
    config_option(listing)
    listing.add_argument("--all", action="store_true", help="include silences that ended")
    listing.set_defaults(run=_run_list)

    expire = actions.add_parser("expire", help="end a silence now; it resolves nothing")
    config_option(expire)
    expire.add_argument("id", type=int, help="the silence's id (see `silence list`)")
    expire.set_defaults(run=_run_expire)


def _ends_at(args: argparse.Namespace, now: datetime) -> datetime:
    from monitor.config import parse_duration

    try:
        if args.duration is not None:
            return now + timedelta(seconds=parse_duration(args.duration))
        instant = datetime.fromisoformat(args.until.strip().replace("Z", "+00:00"))
    except (ValueError, OverflowError) as exc:
        raise CommandError(f"--for/--until: {exc}") from None
    return instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)


def _run_add(args: argparse.Namespace) -> int:
    from monitor.identity.storage import record_event
    from monitor.notify import silences

    now, caller = datetime.now(UTC), command_line()
    reason = f"for {args.by}: {args.reason}" if args.by else args.reason
    store = open_store(load(args))
    try:
        with store.sessions.begin() as session:
            record = silences.create_silence(
                session,
                server=args.server,
                tool=args.tool,
                rule=args.rule,
                ends_at=_ends_at(args, now),
                created_by=caller.name,
                reason=reason,
                now=now,
            )
            record_event(
                session, caller, "silence.create", f"silence {record.id}", at=now, detail={"reason": reason}
            )
    except silences.SilenceError as exc:
        raise CommandError(str(exc)) from None
    finally:
        store.engine.dispose()
    print(f"silence {record.id} created: {_describe(record)}")
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    from monitor.notify import silences

    store = open_store(load(args))
    try:
        with store.sessions() as session:
            records = silences.list_silences(session, now=datetime.now(UTC), active_only=not args.all)
    finally:
        store.engine.dispose()
    if not records:
        print("no active silences" if not args.all else "no silences")
    for record in records:
        print(f"{record.id}\t{'active' if record.active else 'ended'}\t{_describe(record)}")
    return EXIT_OK


def _run_expire(args: argparse.Namespace) -> int:
    from monitor.identity.storage import record_event
    from monitor.notify import silences

    now, caller = datetime.now(UTC), command_line()
    store = open_store(load(args))
    try:
        with store.sessions.begin() as session:
            record = silences.expire_silence(session, args.id, now)
            if record is not None:
                record_event(session, caller, "silence.expire", f"silence {args.id}", at=now)
    finally:
        store.engine.dispose()
    if record is None:
        raise CommandError(f"no silence {args.id}")
    print(f"silence {record.id} ended at {utc_text(record.ends_at)}", file=sys.stdout)
    return EXIT_OK


def _describe(record: SilenceRecord) -> str:
    what = ", ".join(
        f"{label} {make_visible(value)}"
        for label, value in (("server", record.server), ("tool", record.tool), ("rule", record.rule))
        if value is not None
    )
    return (
        f"mutes {what} until {utc_text(record.ends_at)}; by {make_visible(record.created_by)}: "
        f"{make_visible(record.reason)}"
    )
