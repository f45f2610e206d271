"""The offline commands: diff, scan, fingerprint, rules. No database, no network."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from monitor.console.common import EXIT_FINDINGS, EXIT_OK, CommandError, severity, wants_colour
from monitor.console.report import write_findings, write_text_report
from monitor.core.diff import diff_canonical, first_sight
from monitor.core.findings import Severity
from monitor.core.fingerprint import CanonicalListing, NotIJSONError
from monitor.core.listing import ListingError, Tool, load_listing, read_listing
from monitor.core.rules import CATALOG, Rule, documented_order
from monitor.core.rules.catalog import judged
from monitor.core.rules.poisoning import instructions_verdicts


def register(commands: Any) -> None:
    diff = commands.add_parser("diff", help="compare two listing files offline")
    diff.add_argument(
        "old", help="a tools/list result, a JSON-RPC response wrapping one, or a tool array (- for stdin)"
    )
    diff.add_argument("new", help="the same (- for stdin)")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.add_argument(
        "--fail-on",
        type=severity,
        metavar="SEVERITY",
        help="exit 1 when any finding is at or above this severity (info, low, medium, high, critical)",
    )
    diff.set_defaults(run=_run_diff)

    scan = commands.add_parser(
        "scan",
        help="judge a listing as at first sight: the text a model reads, before a release (offline)",
    )
    scan.add_argument("listing", help="a listing file, as diff takes it (- for stdin)")
    scan.add_argument("--instructions", metavar="FILE", help="the server's instructions, as plain text")
    scan.add_argument("--format", choices=("text", "json"), default="text")
    scan.add_argument(
        "--fail-on",
        type=severity,
        metavar="SEVERITY",
        help="exit 1 when any finding is at or above this severity (info, low, medium, high, critical)",
    )
    scan.set_defaults(run=_run_scan)

    fp = commands.add_parser("fingerprint", help="print the fingerprint of a listing file")
    fp.add_argument("file", help="a listing file (- for stdin)")
    fp.set_defaults(run=_run_fingerprint)

    rules = commands.add_parser("rules", help="list every rule with its severity and meaning")
    rules.add_argument("--format", choices=("text", "markdown"), default="text")
    rules.set_defaults(run=_run_rules)


def _run_diff(args: argparse.Namespace) -> int:
    if args.old == args.new == "-":
        raise CommandError("only one of OLD and NEW can be - (stdin)")
    result = diff_canonical(_canonical(args.old), _canonical(args.new))
    if args.format == "json":
        json.dump(result.to_dict(), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        write_text_report(result, sys.stdout, colour=wants_colour(sys.stdout))
    threshold: Severity | None = args.fail_on
    if threshold is not None and any(f.severity.rank >= threshold.rank for f in result.findings):
        return EXIT_FINDINGS
    return EXIT_OK


def _run_scan(args: argparse.Namespace) -> int:
    """What the monitor would raise on a server's first listing (and its instructions), offline."""
    listing = _canonical(args.listing)
    findings = first_sight(listing)
    if args.instructions is not None:
        try:
            told = Path(args.instructions).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{args.instructions}: cannot read as UTF-8 text: {exc}") from None
        found, _ = judged(instructions_verdicts("(this server)", None, told, first=True))
        findings += found
    if args.format == "json":
        body = {"fingerprint": listing.fingerprint, "findings": [f.to_dict() for f in findings]}
        json.dump(body, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(f"listing {listing.fingerprint[:12]}  {len(listing.tools)} tool(s)\n")
        write_findings(findings, sys.stdout, colour=wants_colour(sys.stdout))
    threshold: Severity | None = args.fail_on
    if threshold is not None and any(f.severity.rank >= threshold.rank for f in findings):
        return EXIT_FINDINGS
    return EXIT_OK


def _run_fingerprint(args: argparse.Namespace) -> int:
    print(_canonical(args.file).fingerprint)
    return EXIT_OK


def _listing(path: str) -> list[Tool]:
    """The listing in a file, or on standard input for `-`."""
    if path != "-":
        return load_listing(path)
    try:
        text = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError:
        raise ListingError("<stdin>: not UTF-8 text") from None
    return read_listing(text, "<stdin>")


def _canonical(path: str) -> CanonicalListing:
    """The listing in the file (or on standard input for `-`), canonicalised; a listing RFC 8785
    cannot serialise is an error naming the file and the spot."""
    try:
        return CanonicalListing.of(_listing(path))
    except NotIJSONError as exc:
        raise ListingError(f"{path}: not I-JSON: {exc}") from None


def _run_rules(args: argparse.Namespace) -> int:
    sys.stdout.write(rules_markdown() if args.format == "markdown" else rules_text())
    return EXIT_OK


def rules_text() -> str:
    width = max(len(rule.id) for rule in CATALOG.values())
    rules = documented_order(CATALOG.values())
    return "".join(f"{r.id:<{width}}  {r.severity.value:<8}  {r.meaning}\n" for r in rules)


def rules_markdown() -> str:
    """docs/rules.md's catalog, generated from the catalog (a test keeps the two in step): each scope's
    rules, then each family's across scopes."""
    lines = [
        "# Rules",
        "",
        "Generated by `drift-monitor rules --format markdown` from `monitor/core/rules/`; do not edit.",
        "",
    ]
    ordered = documented_order(CATALOG.values())
    sections: list[tuple[str, list[Rule]]] = [
        (title, [r for r in ordered if r.scope == scope and r.family is None])
        for scope, title in (
            ("tool", "Tool definitions"),
            ("listing", "Listing changes"),
            ("server", "Servers"),
            ("session", "Host sessions"),
        )
    ]
    sections += [
        (FAMILIES.get(family, family), [r for r in ordered if r.family == family]) for family in FAMILIES
    ]
    for title, rules in sections:
        lines += [f"## {title}", "", "| rule | severity | meaning |", "|---|---|---|"]
        lines += [f"| `{r.id}` | {r.severity.value} | {r.meaning} |" for r in rules]
        lines.append("")
    return "\n".join(lines)


FAMILIES = {"poisoning": "Model-visible text (tool poisoning)"}
"""Each family's section title in docs/rules.md, in order."""
