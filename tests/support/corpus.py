"""The poisoning corpus (`tests/data/poisoning/corpus.json`) judged by the content rules, case by case.

A case is caught when a rule of the `poisoning` family raises a finding at high or above; a benign
case must raise none of theirs (they are all high). What each case is, and where it comes from, is
in the corpus itself.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.core.diff import diff_changes, first_sight
from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules import CATALOG
from monitor.core.rules.catalog import judged
from monitor.core.rules.poisoning import FAMILY, instructions_verdicts, shadowing

CORPUS = Path(__file__).resolve().parent.parent / "data" / "poisoning" / "corpus.json"


@dataclass(frozen=True)
class Judged:
    case: dict[str, Any]
    findings: list[Finding]

    @property
    def poison(self) -> bool:
        return self.case["label"] == "poison"

    @property
    def caught(self) -> bool:
        """A finding of the family at high or above."""
        return any(
            CATALOG[f.rule].family == FAMILY and f.severity.rank >= Severity.HIGH.rank for f in self.findings
        )


def cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(CORPUS.read_text(encoding="utf-8"))["cases"]
    return cases


def judge(case: dict[str, Any]) -> Judged:
    """The findings the monitor raises on one case, as a poll would: a diff, first sight, or instructions."""
    kind, before, after = case["kind"], case["before"], case["after"]
    if kind == "instructions":
        findings, _ = judged(instructions_verdicts("server", before, after, first=before is None))
        return Judged(case, findings)
    if kind == "first-sight":
        findings = first_sight(CanonicalListing.of([after]))
        change = ToolChange(after["name"], None, after)
    else:
        change = ToolChange(after["name"], before, after)
        findings = list(diff_changes([change]))
    others: dict[str, list[str]] = {}
    for server, names in case.get("other_servers", {}).items():
        for name in names:
            others.setdefault(name, []).append(server)
    shadows, _ = judged(shadowing([change], [after["name"]], lambda names: others))
    return Judged(case, findings + shadows)


@dataclass(frozen=True)
class Report:
    caught: int
    poison: int
    false_alarms: int
    benign: int

    @property
    def recall(self) -> float:
        return self.caught / self.poison if self.poison else 1.0

    @property
    def precision(self) -> float:
        flagged = self.caught + self.false_alarms
        return self.caught / flagged if flagged else 1.0

    def lines(self) -> list[str]:
        return [
            f"- poisoned cases caught: {self.caught} of {self.poison} (recall {self.recall:.1%})",
            f"- benign cases flagged: {self.false_alarms} of {self.benign} "
            f"(false alarms {self.false_alarms / self.benign:.1%}; precision {self.precision:.1%})",
        ]


def report(results: list[Judged]) -> Report:
    counts = Counter((result.poison, result.caught) for result in results)
    return Report(
        caught=counts[True, True],
        poison=counts[True, True] + counts[True, False],
        false_alarms=counts[False, True],
        benign=counts[False, True] + counts[False, False],
    )


FIRST_MEASURED = (63, 0)
"""Poisoned cases caught and benign cases flagged by the patterns as first written, before they were
revised against this corpus: the fairer figure for text the patterns were not shaped on."""


def section() -> str:
    """docs/rules.md's closing section: how the family fares on the corpus (after the generated catalog)."""
    results = [judge(case) for case in cases()]
    figures = report(results)
    kinds = Counter(result.case["kind"] for result in results)
    return "\n".join(
        [
            "## How the model-visible text rules fare",
            "",
            f"On the corpus in `tests/data/poisoning/corpus.json` ({len(results)} cases: "
            f"{figures.poison} poisoned, {figures.benign} benign; "
            + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
            + "), a case counts as caught when a rule of the family raises a finding at high or above. "
            "Each case names its source: the benign ones are real tool descriptions, real edits and "
            "real server instructions from public MCP servers; the poisoned ones are published attacks "
            "and variations of them written for the corpus (paraphrased, in seven languages, spread "
            "over a long description, in a parameter, an enum value, a default, a title, a property "
            "name, a tool name, the instructions, hidden by whitespace, escapes or encodings).",
            "",
            *figures.lines(),
            "",
            f"The patterns were revised against this corpus. As first written, before any case was read, "
            f"they caught {FIRST_MEASURED[0]} of {figures.poison} poisoned cases and flagged "
            f"{FIRST_MEASURED[1]} of {figures.benign} benign ones: text shaped unlike the corpus may fare "
            "nearer that. `tests/support/corpus.py` writes this section; a test keeps it in step.",
            "",
        ]
    )


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from monitor.cli.offline import rules_markdown

    DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "rules.md"
    DOCS.write_text(rules_markdown() + section(), encoding="utf-8")
    print(f"wrote {DOCS}")
