"""Diffing two listings: match tools by name and run every tool rule over what changed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from monitor.core.fingerprint import CanonicalListing
from monitor.core.listing import Tool
from monitor.core.rules import FIRST_SIGHT_CHECKS, LISTING_CHECKS, TOOL_CHECKS, Finding, Severity, ToolChange


@dataclass(frozen=True)
class ListingDiff:
    old_fingerprint: str
    new_fingerprint: str
    findings: list[Finding]

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_fingerprint": self.old_fingerprint,
            "new_fingerprint": self.new_fingerprint,
            "findings": [finding.to_dict() for finding in self.findings],
        }


def diff_listings(old: list[Tool], new: list[Tool]) -> ListingDiff:
    """Findings between two validated listings, ordered by tool name, then severity, worst first."""
    return diff_canonical(CanonicalListing.of(old), CanonicalListing.of(new))


def diff_canonical(old: CanonicalListing, new: CanonicalListing) -> ListingDiff:
    """The diff of two indexed listings: unchanged tools cost one string comparison each."""
    findings: list[Finding] = []
    if old.fingerprint != new.fingerprint:
        changed = (
            name
            for name in sorted(old.forms.keys() | new.forms.keys())
            if old.forms.get(name) != new.forms.get(name)
        )
        changes = (ToolChange(name, _tool(old, name), _tool(new, name)) for name in changed)
        findings = list(diff_changes(changes))
    return ListingDiff(old.fingerprint, new.fingerprint, findings)


def _tool(listing: CanonicalListing, name: str) -> Tool | None:
    tool = listing.tools.get(name)
    return dict(tool) if tool is not None else None


def diff_changes(changes: Iterable[ToolChange]) -> Iterable[Finding]:
    """Every finding of each changed tool, worst severity first within the tool, then those of the
    listing rules over all of the changes at once (a removed and an added tool whose names look
    alike: `tool-renamed-lookalike`)."""
    changes = list(changes)
    for change in changes:
        found = [finding for check in TOOL_CHECKS.values() for finding in check(change)]
        found.sort(key=lambda finding: -finding.severity.rank)
        yield from found
    for listing_check in LISTING_CHECKS.values():
        yield from listing_check(changes)


def first_sight(listing: CanonicalListing) -> list[Finding]:
    """What the tools of a listing seen for the first time raise (a server's first version): the rules
    that judge every text a model reads (`Rule.first_sight`), over each tool as a whole."""
    findings: list[Finding] = []
    for name in sorted(listing.tools):
        change = ToolChange(name, None, dict(listing.tools[name]))
        found = [finding for check in FIRST_SIGHT_CHECKS.values() for finding in check(change)]
        found.sort(key=lambda finding: -finding.severity.rank)
        findings += found
    return findings
