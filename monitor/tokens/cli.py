"""`drift-monitor token create | list | revoke`: named tokens with roles, made from the command line."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.console.common import EXIT_OK, CommandError, command_line, config_option, load, open_store
from monitor.core.roles import Role
from monitor.core.times import utc_text


def register(commands: Any) -> None:
    token = commands.add_parser("token", help="named API tokens with roles: create, list, revoke")
    actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser(
        "create", help="make a token; its secret is printed once, alone on the last line of stdout"
    )
    config_option(create)
    create.add_argument("name", help="who or what uses it (letters, digits, . _ -)")
    create.add_argument("--role", required=True, choices=[role.value for role in Role])
    create.add_argument(
        "--expires", metavar="DURATION", help="how long it is valid, e.g. 90d (default: until revoked)"
    )
    create.set_defaults(run=_run_create)

    listing = actions.add_parser("list", help="every named token (never its secret)")
    config_option(listing)
    listing.set_defaults(run=_run_list)

    revoke = actions.add_parser("revoke", help="refuse a token from now on (and its dashboard sessions)")
    config_option(revoke)
    revoke.add_argument("name")
    revoke.set_defaults(run=_run_revoke)


def _run_create(args: argparse.Namespace) -> int:
    from monitor.config import parse_duration
    from monitor.identity.storage import TokenError, create_token, record_event

    try:
        expires = timedelta(seconds=parse_duration(args.expires)) if args.expires else None
    except ValueError as exc:
        raise CommandError(f"--expires: {exc}") from None
    caller, now = command_line(), datetime.now(UTC)
    config = load(args)
    store = open_store(config)
    try:
        with store.sessions.begin() as session:
            try:
                record, secret = create_token(
                    session,
                    args.name,
                    Role(args.role),
                    by=caller.name,
                    now=now,
                    expires=expires,
                    configured=config.monitor.api_token_name,
                )
            except TokenError as exc:
                raise CommandError(str(exc)) from None
            record_event(session, caller, "token.create", args.name, at=now, detail={"role": args.role})
    finally:
        store.engine.dispose()
    until = f", valid until {utc_text(record.expires_at)}" if record.expires_at else ""
    print(
        f"token {record.name!r} ({record.role.value}{until}); its secret, shown this once:", file=sys.stderr
    )
    print(secret)
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    from monitor.identity.storage import list_tokens

    store = open_store(load(args))
    try:
        with store.sessions() as session:
            tokens = list_tokens(session)
    finally:
        store.engine.dispose()
    print(f"{'name':<24} {'role':<10} {'created':<20} {'last used':<20} {'expires':<20} state")
    for token in tokens:
        state = f"revoked by {token.revoked_by}" if token.revoked_at else "active"
        if token.expires_at and not token.revoked_at and token.expires_at <= datetime.now(UTC):
            state = "expired"
        print(
            f"{token.name:<24} {token.role.value:<10} {_when(token.created_at):<20} "
            f"{_when(token.last_used_at):<20} {_when(token.expires_at):<20} {state}"
        )
    return EXIT_OK


def _run_revoke(args: argparse.Namespace) -> int:
    from monitor.identity.storage import TokenError, record_event, revoke_token

    caller, now = command_line(), datetime.now(UTC)
    store = open_store(load(args))
    try:
        with store.sessions.begin() as session:
            try:
                revoke_token(session, args.name, by=caller.name, now=now)
            except TokenError as exc:
                raise CommandError(str(exc)) from None
            record_event(session, caller, "token.revoke", args.name, at=now)
    finally:
        store.engine.dispose()
    print(f"revoked token {args.name!r}: it is refused from now on, and so are its dashboard sessions")
    return EXIT_OK


def _when(at: datetime | None) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if at else "-"
