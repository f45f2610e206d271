"""The `drift-monitor` command line (SPEC section 6)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from monitor.config import Config, ConfigError, load_config
from monitor.core.diff import ListingDiff, diff_listings
from monitor.core.fingerprint import fingerprint
from monitor.core.listing import ListingError, load_listing
from monitor.core.rules import CATALOG, Finding, Severity
from monitor.core.text import make_visible

if TYPE_CHECKING:
    from monitor.store import PollOutcome, Store

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_POLL_FAILED = 3
DEFAULT_CONFIG = "drift-monitor.toml"


class CommandError(Exception):
    """An error the user can fix; printed as one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except (CommandError, ListingError, ConfigError) as exc:
        print(f"drift-monitor: {make_visible(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except RecursionError:
        print("drift-monitor: input is nested too deeply to compare", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not type(exc).__module__.startswith("sqlalchemy"):
            raise
        # A full, read-only or unreachable database: say so in one line, not a traceback.
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"drift-monitor: database error: {make_visible(reason)}", file=sys.stderr)
        return EXIT_USAGE
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drift-monitor",
        description="Watch what MCP servers claim about their tools, and when the claim changes.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diff = commands.add_parser("diff", help="compare two listing files offline")
    diff.add_argument("old", help="a tools/list result, a JSON-RPC response wrapping one, or a tool array")
    diff.add_argument("new")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.add_argument(
        "--fail-on",
        type=_severity,
        metavar="SEVERITY",
        help="exit 1 when any finding is at or above this severity (info, low, medium, high, critical)",
    )
    diff.set_defaults(run=_run_diff)

    fp = commands.add_parser("fingerprint", help="print the fingerprint of a listing file")
    fp.add_argument("file")
    fp.set_defaults(run=_run_fingerprint)

    migrate = commands.add_parser("migrate", help="bring the database to the newest schema")
    _config_option(migrate)
    migrate.set_defaults(run=_run_migrate)

    poll = commands.add_parser("poll", help="poll servers once now, store the results, print what changed")
    _config_option(poll)
    poll.add_argument("names", nargs="*", metavar="NAME", help="servers to poll (default: all)")
    poll.set_defaults(run=_run_poll)

    serve = commands.add_parser("serve", help="run the scheduler, alert delivery and the web app")
    _config_option(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=_run_serve)

    prune = commands.add_parser(
        "prune", help="delete old poll attempts and finished webhook deliveries (history is kept)"
    )
    _config_option(prune)
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
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted; change nothing")
    prune.set_defaults(run=_run_prune)

    rules = commands.add_parser("rules", help="list every rule with its severity and meaning")
    rules.add_argument("--format", choices=("text", "markdown"), default="text")
    rules.set_defaults(run=_run_rules)
    return parser


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("DRIFT_MONITOR_CONFIG"),
        help="TOML config file (default: $DRIFT_MONITOR_CONFIG, else drift-monitor.toml if present)",
    )


def _load_config(args: argparse.Namespace) -> Config:
    path = args.config
    if path is None and os.path.exists(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    return load_config(path)


def _open_store(config: Config) -> Store:
    """The store `poll` records through: findings open alerts and queue webhooks, as under `serve`."""
    from monitor.notify.alerts import alerting_store
    from monitor.store import SchemaNotReady, check_schema, make_engine

    engine = make_engine(config.monitor.database_url)
    try:
        check_schema(engine)
    except SchemaNotReady as exc:
        raise CommandError(str(exc)) from None
    return alerting_store(engine, config)[0]


def _run_migrate(args: argparse.Namespace) -> int:
    from monitor.store import make_engine, migrate, render_url

    config = _load_config(args)
    engine = make_engine(config.monitor.database_url)
    try:
        head = migrate(engine)
    finally:
        engine.dispose()
    print(f"database {render_url(config.monitor.database_url)} is at schema revision {head}")
    return EXIT_OK


def _run_poll(args: argparse.Namespace) -> int:
    from monitor.collect.poller import Poller

    config = _load_config(args)
    if not config.servers:
        raise CommandError(f"{config.source}: no servers configured")
    store = _open_store(config)
    poller = Poller(store, config)
    try:
        jobs = poller.jobs(args.names)
        progress = _Progress(len(jobs), sys.stderr)
        outcomes = asyncio.run(poller.poll(jobs, on_outcome=progress.step))
        progress.done()
    finally:
        poller.close()
        store.engine.dispose()
    write_poll_report(outcomes, sys.stdout, colour=_wants_colour(sys.stdout))
    return EXIT_POLL_FAILED if any(not outcome.ok for outcome in outcomes) else EXIT_OK


def _run_serve(args: argparse.Namespace) -> int:
    from monitor.collect.scheduler import InstanceLockError
    from monitor.service import serve
    from monitor.store import SchemaNotReady

    config = _load_config(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(config, args.host, args.port, ready=lambda url: print(f"READY {url}", flush=True)))
    except (InstanceLockError, SchemaNotReady) as exc:
        raise CommandError(str(exc)) from None
    return EXIT_OK


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


def _run_prune(args: argparse.Namespace) -> int:
    """Trim poll attempts and finished deliveries older than the cutoff; snapshots and findings stay."""
    from datetime import UTC, datetime, timedelta

    from monitor.store import SchemaNotReady, check_schema, make_engine, prune_poll_attempts, render_url

    config = _load_config(args)
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


class _Progress:
    """`polled 37/200` on a terminal while many servers are polled; silent otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.count, self.stream = total, 0, stream
        self.active = total > 1 and stream.isatty()

    def step(self, outcome: PollOutcome) -> None:
        self.count += 1
        if self.active:
            failed = "" if outcome.ok else f"  last failure: {outcome.server}"
            self.stream.write(f"\r\033[Kpolled {self.count}/{self.total}{make_visible(failed)}")
            self.stream.flush()

    def done(self) -> None:
        if self.active:
            self.stream.write("\r\033[K")
            self.stream.flush()


def write_poll_report(outcomes: Sequence[PollOutcome], out: TextIO, *, colour: bool) -> None:
    """One line per server, then the findings of every server whose listing changed."""
    width = max((len(o.server) for o in outcomes), default=0)
    for outcome in outcomes:
        if not outcome.ok:
            out.write(
                f"FAIL {outcome.server:<{width}}  {outcome.error_kind}: {make_visible(outcome.error or '')}\n"
            )
            continue
        version = f"v{outcome.version}" + (" new" if outcome.new_version else " unchanged")
        summary = "first snapshot" if outcome.version == 1 and outcome.new_version else ""
        if outcome.findings:
            worst = outcome.worst
            assert worst is not None
            summary = f"{len(outcome.findings)} change(s), worst {_badge(worst, colour).strip()}"
        fingerprint_prefix = (outcome.fingerprint or "")[:12]
        out.write(
            f"ok   {outcome.server:<{width}}  {outcome.tool_count:>5} tools  {fingerprint_prefix}  "
            f"{version:<13} {summary}\n".rstrip()
            + "\n"
        )
    for outcome in outcomes:
        for finding in outcome.findings:
            if finding.tool is None and outcome.ok:
                continue
            tool = make_visible(finding.tool) if finding.tool else "(server)"
            out.write(
                f"  {outcome.server}: {_badge(finding.severity, colour)} {finding.rule:<28} {tool}: "
                f"{make_visible(finding.message)}\n"
            )


def _severity(value: str) -> Severity:
    try:
        return Severity.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_diff(args: argparse.Namespace) -> int:
    result = diff_listings(load_listing(args.old), load_listing(args.new))
    if args.format == "json":
        json.dump(result.to_dict(), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        write_text_report(result, sys.stdout, colour=_wants_colour(sys.stdout))
    threshold: Severity | None = args.fail_on
    if threshold is not None and any(f.severity.rank >= threshold.rank for f in result.findings):
        return EXIT_FINDINGS
    return EXIT_OK


def _run_fingerprint(args: argparse.Namespace) -> int:
    print(fingerprint(load_listing(args.file)))
    return EXIT_OK


def _run_rules(args: argparse.Namespace) -> int:
    sys.stdout.write(rules_markdown() if args.format == "markdown" else rules_text())
    return EXIT_OK


def rules_text() -> str:
    width = max(len(rule.id) for rule in CATALOG.values())
    return "".join(f"{r.id:<{width}}  {r.severity.value:<8}  {r.meaning}\n" for r in CATALOG.values())


def rules_markdown() -> str:
    """docs/rules.md, generated from the catalog (a test keeps the two in step)."""
    lines = [
        "# Rules",
        "",
        "Generated by `drift-monitor rules --format markdown` from `monitor/core/rules/`; do not edit.",
        "",
    ]
    for scope, title in (("tool", "Tool definitions"), ("server", "Servers"), ("session", "Host sessions")):
        lines += [f"## {title}", "", "| rule | severity | meaning |", "|---|---|---|"]
        lines += [
            f"| `{r.id}` | {r.severity.value} | {r.meaning} |" for r in CATALOG.values() if r.scope == scope
        ]
        lines.append("")
    return "\n".join(lines)


_COLOURS = {
    Severity.CRITICAL: "\033[1;97;41m",
    Severity.HIGH: "\033[1;31m",
    Severity.MEDIUM: "\033[33m",
    Severity.LOW: "\033[36m",
    Severity.INFO: "\033[2m",
}
_RESET = "\033[0m"


def _wants_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def write_text_report(result: ListingDiff, out: TextIO, *, colour: bool) -> None:
    """Findings grouped by tool, the tools with the worst findings first; server text made visible."""
    by_tool: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_tool.setdefault(finding.tool or "", []).append(finding)
    out.write(f"old {result.old_fingerprint[:12]}  new {result.new_fingerprint[:12]}\n")
    if not result.findings:
        same = result.old_fingerprint == result.new_fingerprint
        out.write("identical listings\n" if same else "no findings\n")
        return
    worst = result.worst
    assert worst is not None
    out.write(
        f"{len(result.findings)} finding(s) in {len(by_tool)} tool(s), worst: {_badge(worst, colour)}\n"
    )
    ordered = sorted(by_tool.items(), key=lambda item: (-max(f.severity.rank for f in item[1]), item[0]))
    for tool, findings in ordered:
        out.write(f"\n{make_visible(tool)}\n")
        for finding in findings:
            change = f"{_show(finding.old)} -> {_show(finding.new)}" if _is_flag(finding) else ""
            where = make_visible(finding.field or "")
            head = "  ".join(part for part in (finding.rule, where, change) if part)
            out.write(f"  {_badge(finding.severity, colour)}  {head}\n")
            out.write(f"  {'':9}  {make_visible(finding.message)}\n")
            detail = finding.detail if isinstance(finding.detail, dict) else {}
            if detail.get("word_diff"):
                out.write(f"  {'':9}  {_render_word_diff(detail['word_diff'], colour)}\n")
            elif "codepoints" in detail and isinstance(finding.new, str):
                out.write(f"  {'':9}  {_elide(make_visible(finding.new))}\n")


def _badge(severity: Severity, colour: bool) -> str:
    label = f"{severity.value.upper():<9}"
    return f"{_COLOURS[severity]}{label}{_RESET}" if colour else label


def _is_flag(finding: Finding) -> bool:
    return isinstance(finding.old, bool) or isinstance(finding.new, bool)


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else make_visible(value)


def _render_word_diff(ops: list[list[str]], colour: bool) -> str:
    marks = {"-": ("[-", "-]", "\033[31m"), "+": ("{+", "+}", "\033[32m")}
    parts = []
    for op, text in ops:
        visible = make_visible(text).replace("\n", " ")
        if op == "=":
            parts.append(_elide(visible))
            continue
        start, end, code = marks[op]
        parts.append(f"{code}{start}{visible}{end}{_RESET}" if colour else f"{start}{visible}{end}")
    return "".join(parts)


def _elide(text: str, keep: int = 40) -> str:
    """Long unchanged runs shrink to their ends, so the change stays on screen."""
    return text if len(text) <= 2 * keep + 5 else f"{text[:keep]} … {text[-keep:]}"


if __name__ == "__main__":
    sys.exit(main())
