"""Rules on a listing as a whole.

`listing-invalid` is what hosts will do with it (reject it); `changed-without-version-bump` is whether
the server said it changed. Both are judged at every new version: raised by one that shows them,
and cleared (their alerts resolve) by the first that does not. `duplicate-tool-name` is raised by a
poll whose listing names a tool twice, which the monitor refuses to store (hosts keep one of the
copies, and not all the same one), and holds until the server answers with a listing it can store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monitor.core.findings import Finding, Severity
from monitor.core.listing import Tool, hints_of, strictest_hints
from monitor.core.rules.catalog import PollFacts, Rule, Verdict, rule
from monitor.core.text import make_visible


@rule(
    "listing-invalid",
    Severity.HIGH,
    "The listing is valid JSON but violates the MCP schema hosts validate against (e.g. an inputSchema "
    "without type object): hosts will reject it. It is stored as a version like any other.",
    scope="server",
)
def listing_invalid(rule: Rule, server: str, version: int, errors: Sequence[str]) -> Verdict:
    """Judged at every new version, from the schema check's errors."""
    if not errors:
        return rule.cleared()
    shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
    return rule.finding(
        None,
        None,
        None,
        None,
        f"Version {version} of {server} breaks the MCP schema, so hosts that validate will reject the "
        f"listing: {shown}.",
        detail={"errors": list(errors)},
    )


@rule(
    "changed-without-version-bump",
    Severity.LOW,
    "The listing changed while serverInfo.version stayed the same.",
    scope="server",
)
def changed_without_version_bump(
    rule: Rule,
    server: str,
    version: int,
    old_info: Mapping[str, Any] | None,
    new_info: Mapping[str, Any] | None,
) -> Verdict:
    """Judged at every new version after the first. Only when both sides name a version and it is the
    same: an absent version says nothing."""
    old, new = (info.get("version") if isinstance(info, Mapping) else None for info in (old_info, new_info))
    if not isinstance(new, str) or old != new:
        return rule.cleared()
    return rule.finding(
        None,
        "serverInfo.version",
        old,
        new,
        f"{server} changed its listing (version {version}) but still reports serverInfo.version {new!r}.",
    )


def answered_with_a_listing(poll: PollFacts) -> bool:
    """A listing the monitor could store ends it (after a refused one, which counts as a failed poll:
    a healthy server's poll has none to end)."""
    return poll.answered and poll.was_failing


@rule(
    "duplicate-tool-name",
    Severity.HIGH,
    "The listing names one tool more than once: hosts keep one copy, not all the same one, so the "
    "monitor refuses the listing and every decision about the server is deny until it is fixed.",
    scope="server",
    clears=answered_with_a_listing,
)
def duplicate_tool_names(rule: Rule, server: str, duplicates: Mapping[str, Sequence[Tool]]) -> list[Finding]:
    """One finding per tool name listed more than once, with the strictest reading of its copies."""
    findings = []
    for name, copies in duplicates.items():
        readings = [hints_of(copy) for copy in copies]
        strictest = strictest_hints(readings)
        alike = (
            "the same definition" if all(copy == copies[0] for copy in copies) else "different definitions"
        )
        if strictest["readOnlyHint"]:
            reading = "is read-only"
        else:
            reading = "may write" + (", destructively" if strictest["destructiveHint"] else "")
        findings.append(
            rule.finding(
                None,
                "name",
                None,
                len(copies),
                f"{server} lists the tool {make_visible(name)} {len(copies)} times with {alike}: hosts keep "
                "one copy (a JavaScript host the last), so the monitor refuses the listing and denies every "
                f"call to the server until each tool is listed once. Read strictly, it {reading}.",
                detail={"tool": name, "copies": readings, "strictest": strictest},
            )
        )
    return findings
