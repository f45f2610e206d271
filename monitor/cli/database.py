"""The commands on the database: migrate, poll, prune."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from monitor.console.common import (
    EXIT_OK,
    EXIT_POLL_FAILED,
    CommandError,
    config_option,
    load,
    open_store,
    wants_colour,
)
from monitor.console.report import Progress, write_alert_report, write_poll_report
from monitor.core.text import make_visible

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from monitor.store.retention import Progress as PruneProgress


def register(commands: Any) -> None:
    migrate = commands.add_parser("migrate", help="bring the database to the newest schema")
    config_option(migrate)
    migrate.set_defaults(run=_run_migrate)

    poll = commands.add_parser("poll", help="poll servers once now, store the results, print what changed")
    config_option(poll)
    poll.add_argument("names", nargs="*", metavar="NAME", help="servers to poll (default: all)")
    poll.set_defaults(run=_run_poll)

    prune = commands.add_parser(
        "prune",
        help="delete old poll attempts, finished webhook deliveries and kept decisions (history is kept)",
    )
    config_option(prune)
    prune.add_argument(
        "--older-than",
        type=_prune_age,
        default="30d",
        metavar="DURATION",
        help="delete records older than this (e.g. 30d, 12h; default 30d)",
    )
    prune.add_argument(
        "--batch-size",
        type=_prune_batch_size,
        default=5000,
        metavar="N",
        help="rows deleted per transaction (default 5000)",
    )
    prune.add_argument(
        "--audit-older-than",
        type=_prune_age,
        default=None,
        metavar="DURATION",
        help="also delete audit events older than this (e.g. 400d; default: the audit log is kept)",
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted; change nothing")
    prune.set_defaults(run=_run_prune)


def _run_migrate(args: argparse.Namespace) -> int:
    from monitor.store import make_engine, migrate, render_url

    config = load(args)
    engine = make_engine(config.monitor.database_url)
    try:
        head = migrate(engine)
    finally:
        engine.dispose()
    print(f"database {render_url(config.monitor.database_url)} is at schema revision {head}")
    return EXIT_OK


def _run_poll(args: argparse.Namespace) -> int:
    from monitor import tracing
    from monitor.collect.poller import Poller
    from monitor.store import queries

    config = load(args)
    store = open_store(config)
    poller = Poller(store, config)
    try:
        jobs = poller.jobs(args.names)
        for line in poller.skipped:  # the rest is polled: say what was not, and exit 3
            print(f"drift-monitor: warning: {make_visible(line)}", file=sys.stderr)
        if not jobs and not poller.skipped:
            raise CommandError(f"{config.source}: no servers configured or registered")
        progress = Progress(len(jobs), sys.stderr)
        with tracing.exporting(config.tracing.otlp_endpoint, config.tracing.service_name):
            outcomes = asyncio.run(poller.poll(jobs, on_outcome=progress.step))
        progress.done()
        with store.sessions() as session:
            unresolved = queries.unresolved_alerts(session, [job.server_id for job in jobs])
    finally:
        poller.close()
        store.engine.dispose()
    colour = wants_colour(sys.stdout)
    write_poll_report(outcomes, sys.stdout, colour=colour)
    write_alert_report(unresolved, sys.stdout, colour=colour)
    failed = poller.skipped or any(not outcome.ok for outcome in outcomes)
    return EXIT_POLL_FAILED if failed else EXIT_OK


def _prune_age(value: str) -> float:
    from monitor.config import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _prune_batch_size(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive whole number")
    return size


def _prune_audit(engine: Engine, args: argparse.Namespace, step: PruneProgress) -> None:
    """Audit events before their own cutoff; the pruning itself is the log's newest event."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy.orm import Session

    from monitor.console.common import command_line
    from monitor.identity.storage import prune_audit, record_event

    now = datetime.now(UTC)
    cutoff = now - timedelta(seconds=args.audit_older_than)
    count = prune_audit(
        engine, older_than=cutoff, batch_size=args.batch_size, dry_run=args.dry_run, progress=step
    )
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {count} audit events from before {cutoff.isoformat(timespec='seconds')}", flush=True)
    if not args.dry_run:
        with Session(engine) as session, session.begin():
            detail = {"before": cutoff.isoformat(), "deleted": count}
            record_event(session, command_line(), "audit.prune", "audit log", at=now, detail=detail)


def _run_prune(args: argparse.Namespace) -> int:
    """Trim poll attempts and finished deliveries older than the cutoff; snapshots and findings stay."""
    from datetime import UTC, datetime, timedelta

    from monitor.approvals.storage import prune_decisions
    from monitor.store import SchemaNotReady, check_schema, make_engine, prune_poll_attempts, render_url

    config = load(args)
    cutoff = datetime.now(UTC) - timedelta(seconds=args.older_than)
    engine = make_engine(config.monitor.database_url)
    labels = {
        "poll_attempts": "poll attempts",
        "webhook_deliveries": "webhook deliveries",
        "delivery_attempts": "delivery attempts",
    }

    def step(table: str, deleted: int, so_far: int) -> None:
        print(f"{table}: deleted {deleted} ({so_far} so far)", flush=True)

    try:
        check_schema(engine)
        print(
            f"{'dry run: ' if args.dry_run else ''}pruning {render_url(config.monitor.database_url)}: "
            f"records from before {cutoff.isoformat(timespec='seconds')}, in batches of {args.batch_size}",
            flush=True,
        )
        totals = prune_poll_attempts(
            engine,
            older_than=cutoff,
            batch_size=args.batch_size,
            dry_run=args.dry_run,
            progress=step,
        )
        decisions = prune_decisions(
            engine, older_than=cutoff, batch_size=args.batch_size, dry_run=args.dry_run, progress=step
        )
        print(f"{'would delete' if args.dry_run else 'deleted'} {decisions} kept decisions", flush=True)
        if args.audit_older_than is not None:
            _prune_audit(engine, args, step)
    except SchemaNotReady as exc:
        raise CommandError(str(exc)) from None
    finally:
        engine.dispose()
    counts = ", ".join(f"{totals[table]} {label}" for table, label in labels.items())
    if args.dry_run:
        print(f"would delete {counts}; nothing was changed")
    else:
        print(f"deleted {counts}; snapshots, findings, listings and alerts are kept")
    return EXIT_OK
