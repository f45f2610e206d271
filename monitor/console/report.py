"""What the commands print: findings grouped by tool, poll results, severities in colour on a terminal.

Everything a server chose (tool names, descriptions, error text) goes through `make_visible`, so a
hostile listing cannot hide characters or send escape sequences to the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from monitor.core.diff import ListingDiff
from monitor.core.findings import Finding, Severity
from monitor.core.states import AlertState
from monitor.core.text import make_visible

if TYPE_CHECKING:
    from monitor.store import PollOutcome
    from monitor.store.records import AlertRecord


class Progress:
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
            summary = f"{len(outcome.findings)} change(s), worst {badge(worst, colour).strip()}"
        fingerprint_prefix = (outcome.fingerprint or "")[:12]
        out.write(
            f"ok   {outcome.server:<{width}}  {outcome.tool_count:>5} tools  {fingerprint_prefix}  "
            f"{version:<13} {summary}\n".rstrip()
            + "\n"
        )
        for view, error in outcome.view_errors.items():
            out.write(f"     {'':<{width}}  view {make_visible(view)!r} failed: {make_visible(error)}\n")
    for outcome in outcomes:
        for finding in outcome.findings:
            tool = make_visible(finding.tool) if finding.tool else "(server)"
            out.write(
                f"  {outcome.server}: {badge(finding.severity, colour)} {finding.rule:<28} {tool}: "
                f"{make_visible(finding.message)}\n"
            )


def write_alert_report(alerts: Sequence[AlertRecord], out: TextIO, *, colour: bool) -> None:
    """The unresolved alerts of the polled servers, worst first: what a person should look at now."""
    if not alerts:
        out.write("open alerts: none\n")
        return
    out.write(f"open alerts: {len(alerts)}\n")
    for alert in alerts:
        subject = make_visible(alert.tool or alert.session_id or "(server)")
        state = "" if alert.state == AlertState.OPEN else f" ({alert.state})"
        where = f"{alert.server}: {subject}{state}"
        out.write(f"  #{alert.id} {badge(alert.severity, colour)} {alert.rule:<28} {where}\n")


_COLOURS = {
    Severity.CRITICAL: "\033[1;97;41m",
    Severity.HIGH: "\033[1;31m",
    Severity.MEDIUM: "\033[33m",
    Severity.LOW: "\033[36m",
    Severity.INFO: "\033[2m",
}
_RESET = "\033[0m"


def write_text_report(result: ListingDiff, out: TextIO, *, colour: bool) -> None:
    """Findings grouped by tool, the tools with the worst findings first; server text made visible."""
    out.write(f"old {result.old_fingerprint[:12]}  new {result.new_fingerprint[:12]}\n")
    if not result.findings:
        same = result.old_fingerprint == result.new_fingerprint
        out.write("identical listings\n" if same else "no findings\n")
        return
    write_findings(result.findings, out, colour=colour)


def write_findings(findings: Sequence[Finding], out: TextIO, *, colour: bool) -> None:
    """A count, then the findings grouped by tool (the server's own text, its instructions, apart)."""
    by_tool: dict[str, list[Finding]] = {}
    for finding in findings:
        by_tool.setdefault(finding.tool or "", []).append(finding)
    worst = max((f.severity for f in findings), key=lambda s: s.rank, default=None)
    if worst is None:
        out.write("no findings\n")
        return
    out.write(f"{len(findings)} finding(s) in {len(by_tool)} tool(s), worst: {badge(worst, colour)}\n")
    ordered = sorted(by_tool.items(), key=lambda item: (-max(f.severity.rank for f in item[1]), item[0]))
    for tool, found in ordered:
        out.write(f"\n{make_visible(tool) if tool else '(the server)'}\n")
        for finding in found:
            change = f"{_show(finding.old)} -> {_show(finding.new)}" if _is_flag(finding) else ""
            where = make_visible(finding.field or "")
            head = "  ".join(part for part in (finding.rule, where, change) if part)
            out.write(f"  {badge(finding.severity, colour)}  {head}\n")
            out.write(f"  {'':9}  {make_visible(finding.message)}\n")
            detail = finding.detail if isinstance(finding.detail, dict) else {}
            if detail.get("word_diff"):
                out.write(f"  {'':9}  {_render_word_diff(detail['word_diff'], colour)}\n")
            elif "codepoints" in detail and isinstance(finding.new, str):
                out.write(f"  {'':9}  {_elide(make_visible(finding.new))}\n")


def badge(severity: Severity, colour: bool) -> str:
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
