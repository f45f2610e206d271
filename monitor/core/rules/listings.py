"""Rules on a listing as a whole, evaluated by the poll transaction at each new version.

`listing-invalid` is what hosts will do with it (reject it); `changed-without-version-bump` is whether
the server said it changed. Both are raised once per new version that shows them and stop holding
(their alerts resolve) at the first new version that does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monitor.core.findings import Finding, Severity
from monitor.core.rules.catalog import CATALOG, Clears, PollFacts, Rule


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
