"""Rules on a listing as a whole.

`listing-invalid` is what hosts will do with it (reject it); `changed-without-version-bump` is whether
the server said it changed. Both are raised once per new version that shows them and stop holding
(their alerts resolve) at the first new version that does not. `duplicate-tool-name` is raised by a
poll whose listing names a tool twice, which the monitor refuses to store (hosts keep one of the
copies, and not all the same one), and holds until the server answers with a listing it can store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monitor.core.findings import Finding, Severity
from monitor.core.listing import Tool, hints_of, strictest_hints
from monitor.core.rules.catalog import CATALOG, Clears, PollFacts, Rule
from monitor.core.text import make_visible


def listing_invalid(server: str, version: int, errors: Sequence[str]) -> Finding | None:
    if not errors:
        return None
    shown = "; ".join(errors[:3]) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
    return INVALID.finding(
        None,
        None,
        None,
        None,
        f"Version {version} of {server} breaks the MCP schema, so hosts that validate will reject the "
        f"listing: {shown}.",
        detail={"errors": list(errors)},
    )


def _gone_from_new_version(rule_id: str) -> Clears:
    """A listing rule holds for one version: a new version that does not raise it again ends it."""

    def clears(poll: PollFacts) -> bool:
        return poll.new_version and rule_id not in poll.raised

    return clears


INVALID = Rule(
    "listing-invalid",
    Severity.HIGH,
    "The listing is valid JSON but violates the MCP schema hosts validate against (e.g. an inputSchema "
    "without type object): hosts will reject it. It is stored as a version like any other.",
    "server",
    clears=_gone_from_new_version("listing-invalid"),
)
CATALOG[INVALID.id] = INVALID


def changed_without_version_bump(
    server: str, version: int, old_info: Mapping[str, Any] | None, new_info: Mapping[str, Any] | None
) -> Finding | None:
    """Only when both sides name a version and it is the same: an absent version says nothing."""
    old, new = (info.get("version") if isinstance(info, Mapping) else None for info in (old_info, new_info))
    if not isinstance(new, str) or old != new:
        return None
    return NO_VERSION_BUMP.finding(
        None,
        "serverInfo.version",
        old,
        new,
        f"{server} changed its listing (version {version}) but still reports serverInfo.version {new!r}.",
    )


NO_VERSION_BUMP = Rule(
    "changed-without-version-bump",
    Severity.LOW,
    "The listing changed while serverInfo.version stayed the same.",
    "server",
    clears=_gone_from_new_version("changed-without-version-bump"),
)
CATALOG[NO_VERSION_BUMP.id] = NO_VERSION_BUMP


def duplicate_tool_names(server: str, duplicates: Mapping[str, Sequence[Tool]]) -> list[Finding]:
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
            DUPLICATE_NAME.finding(
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


def answered_with_a_listing(poll: PollFacts) -> bool:
    """A listing the monitor could store ends it (after a refused one, which counts as a failed poll:
    a healthy server's poll has none to end)."""
    return poll.answered and poll.was_failing


DUPLICATE_NAME = Rule(
    "duplicate-tool-name",
    Severity.HIGH,
    "The listing names one tool more than once: hosts keep one copy, not all the same one, so the "
    "monitor refuses the listing and every decision about the server is deny until it is fixed.",
    "server",
    clears=answered_with_a_listing,
)
CATALOG[DUPLICATE_NAME.id] = DUPLICATE_NAME
