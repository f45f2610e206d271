"""The decision policy (docs/contract.md section 10): before a call, is the tool still what was approved?

Annotations are a server's claim about itself, so the monitor answers from what a person approved
and what the server serves now: approved and unchanged -> allow; changed since approval with a
critical or high finding -> deny; any other change, or never approved -> ask; revoked -> deny.
Pure: the caller hands in the approved and the current definition, and gets the answer with its
reason (`decide`, the same for as long as neither changes, so it is cached), then how recently the
monitor verified the server's listing turns it stricter where that is not recent (`verified`, at
every decision): the decision point fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from monitor.core.diff import diff_changes
from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.listing import Hints, Tool, hints_of, strictest_hints
from monitor.core.rules import FIRST_SIGHT_CHECKS
from monitor.core.rules.catalog import judged
from monitor.core.rules.poisoning import instructions_verdicts
from monitor.core.states import ApprovalMode, DecisionKind
from monitor.core.text import make_visible
from monitor.core.times import utc_text

DENY_FROM = Severity.HIGH
"""A change since approval with a finding at or above this is denied; milder changes are asked."""

STALE_LISTING = "stale-listing"
"""Reason code added when the caller's listing fingerprint is not the server's current one."""


@dataclass(frozen=True)
class ApprovedTool:
    """The definition of one tool a person (or trust on first use) approved, and in which version."""

    version: int | None
    fingerprint: str
    """The approved definition's content address (`monitor.core.fingerprint.tool_fingerprint`)."""
    definition: Tool
    tofu: bool = False
    """Approved by trust on first use (the first version's tools in `tofu` mode), not by an event."""


@dataclass(frozen=True)
class Verdict:
    """One answer, in the shape of the decision API (`to_dict`)."""

    decision: DecisionKind
    reason_code: str
    reason: str
    rule: str | None = None
    severity: Severity | None = None
    approved_version: int | None = None
    current_version: int | None = None
    approved: Hints | None = None
    current: Hints | None = None
    enforced: Hints | None = None
    stale_listing: bool = False

    @property
    def reasons(self) -> list[str]:
        return [self.reason_code, STALE_LISTING] if self.stale_listing else [self.reason_code]

    def stale(self) -> Verdict:
        """The same answer for a caller whose cached listing is not the current one."""
        if self.stale_listing:
            return self
        return replace(
            self,
            stale_listing=True,
            reason=f"{self.reason} ({STALE_LISTING}: the caller's listing is not the server's current "
            "one; re-fetch tools/list)",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "reason": self.reason,
            "reasons": self.reasons,
            "rule": self.rule,
            "severity": self.severity.value if self.severity else None,
            "approved_version": self.approved_version,
            "current_version": self.current_version,
            "annotations": {"approved": self.approved, "current": self.current, "enforced": self.enforced},
        }


def enforced_hints(approved: Hints | None, current: Hints | None) -> Hints | None:
    """The stricter of the two per field: read-only and idempotent only if both say so; destructive
    and open-world if either does. With one side missing, that side alone."""
    if approved is None or current is None:
        return approved or current
    return strictest_hints([approved, current])


def decide(
    *,
    tool: str,
    mode: ApprovalMode,
    current_version: int | None,
    current: Tool | None,
    approved: ApprovedTool | None,
    current_fingerprint: str | None = None,
    revoked: bool = False,
    instructions: Finding | None = None,
) -> Verdict:
    """The decision for one tool. `current_version` None: the server was never polled successfully.

    Pass the current definition's fingerprint when known: one equal to the approved one skips the diff.
    A current definition whose text, judged whole, carries a content finding at `DENY_FROM` or above
    is denied (`poisoned-text`) unless a person approved that very definition: trust on first use never
    trusts it. `instructions` is the server's instructions' worst such finding, while no person has
    approved them: no tool of the server is then more than `ask` (`poisoned-instructions`).
    """
    found = _decide(tool, mode, current_version, current, approved, current_fingerprint, revoked)
    if instructions is None or found.decision != DecisionKind.ALLOW or found.reason_code == "approval-off":
        return found
    return replace(
        found,
        decision=DecisionKind.ASK,
        reason_code="poisoned-instructions",
        reason=f"the server's instructions carry {instructions.rule} ({instructions.severity.value}), "
        f"not yet approved: {instructions.message}",
        rule=instructions.rule,
        severity=instructions.severity,
    )


def _decide(
    tool: str,
    mode: ApprovalMode,
    current_version: int | None,
    current: Tool | None,
    approved: ApprovedTool | None,
    current_fingerprint: str | None,
    revoked: bool,
) -> Verdict:
    label = make_visible(tool)
    approved_hints = hints_of(approved.definition) if approved else None
    current_hints = hints_of(current) if current is not None else None

    def verdict(
        decision: DecisionKind,
        code: str,
        reason: str,
        rule: str | None = None,
        severity: Severity | None = None,
    ) -> Verdict:
        return Verdict(
            decision,
            code,
            reason,
            rule,
            severity,
            approved_version=approved.version if approved else None,
            current_version=current_version,
            approved=approved_hints,
            current=current_hints,
            enforced=enforced_hints(approved_hints, current_hints),
        )

    if mode == ApprovalMode.OFF:
        return verdict(DecisionKind.ALLOW, "approval-off", "approval off for this server")
    if current_version is None:
        return verdict(
            DecisionKind.ASK,
            "never-polled",
            "the server was never polled: the monitor has not seen its tools yet",
        )
    if current is None:
        if approved is None:
            return verdict(
                DecisionKind.DENY,
                "unknown-tool",
                f"{label!r} is not in the server's current listing",
            )
        return verdict(
            DecisionKind.DENY,
            "tool-removed",
            f"{label!r} was approved in version {approved.version} but the server no longer lists it",
            rule="tool-removed",
            severity=Severity.LOW,
        )
    if revoked:
        return verdict(
            DecisionKind.DENY,
            "revoked",
            f"the approval of {label!r} was revoked: a person must approve it again before it is called",
        )
    unchanged = approved is not None and (
        approved.fingerprint == current_fingerprint if current_fingerprint else approved.definition == current
    )
    if approved is None or approved.tofu or not unchanged:
        poison = poisoned(tool, current)
        if poison is not None:
            return verdict(
                DecisionKind.DENY,
                "poisoned-text",
                f"{poison.rule} ({poison.severity.value}): {poison.message} A person must approve this "
                "definition before it is called.",
                rule=poison.rule,
                severity=poison.severity,
            )
    if approved is None:
        if mode == ApprovalMode.REVIEW:
            return verdict(
                DecisionKind.ASK,
                "not-approved",
                f"{label!r} has not been approved yet (approval mode review)",
            )
        added = _worst(ToolChange(tool, None, current))
        return verdict(
            DecisionKind.ASK,
            "not-approved",
            f"{label!r} appeared after the first version was trusted and has not been approved",
            rule=added.rule if added else None,
            severity=added.severity if added else None,
        )
    if unchanged:
        where = f"version {approved.version}" if approved.version is not None else "an earlier version"
        return verdict(DecisionKind.ALLOW, "approved", f"{label!r} is as approved in {where}")
    worst = _worst(ToolChange(tool, approved.definition, current))
    if worst is None:
        return verdict(
            DecisionKind.ASK,
            "changed-since-approval",
            f"{label!r} changed since it was approved in version {approved.version}",
        )
    decision = DecisionKind.DENY if worst.severity.rank >= DENY_FROM.rank else DecisionKind.ASK
    return verdict(
        decision,
        "changed-since-approval",
        f"{worst.rule} ({worst.severity.value}) since approval of version {approved.version}: "
        f"{worst.message}",
        rule=worst.rule,
        severity=worst.severity,
    )


@dataclass(frozen=True)
class Verification:
    """How recently, and whether, the monitor verified a server's listing: read at every decision."""

    last_verified: datetime | None
    """The server's last successful poll."""
    unverifiable_reason: str | None
    """Why its newest answers were refused, while they are (None: its newest answer was stored)."""
    max_age: timedelta
    """How old the last verification may be before decisions stop trusting it (`decision_max_age`)."""
    when_stale: DecisionKind = DecisionKind.ASK
    """The answer once it is older (`stale_decision`)."""


def verified(verdict: Verdict, verification: Verification, now: datetime) -> Verdict:
    """`verdict` as it stands while the listing it rests on is verified and recent; stricter otherwise.

    A server that answered with a listing the monitor refused (malformed, duplicate names, over a
    limit) gets `deny` for every tool (`listing-unverifiable`): a host may accept what the monitor
    refused. A server whose last good listing is older than the allowed age gets at least
    `when_stale` (`listing-stale`): a change may have happened since. `approval-off` is the operator
    turning decisions off, and a server never polled is already `ask`.
    """
    if verdict.reason_code in ("approval-off", "never-polled"):
        return verdict
    if verification.unverifiable_reason is not None:
        return replace(
            verdict,
            decision=DecisionKind.DENY,
            reason_code="listing-unverifiable",
            reason="the server's newest answer could not be verified, so no call to it is allowed until "
            f"it serves a listing the monitor can store ({verification.unverifiable_reason})",
            rule=None,
            severity=None,
        )
    last = verification.last_verified
    if last is not None and now - last <= verification.max_age:
        return verdict
    if verdict.decision.strictness >= verification.when_stale.strictness:
        return verdict
    since = f"since {utc_text(last)}" if last is not None else "ever"
    return replace(
        verdict,
        decision=verification.when_stale,
        reason_code="listing-stale",
        reason=f"the monitor has not verified the server's listing {since}, longer than the "
        f"{_duration(verification.max_age)} decisions trust it: a change may have gone unseen",
    )


def _duration(age: timedelta) -> str:
    seconds = int(age.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def poisoned(tool: str, current: Tool) -> Finding | None:
    """The worst finding, at `DENY_FROM` or above, of the rules that judge model-visible text, on the
    tool's current definition judged whole (as at first sight), or None."""
    change = ToolChange(tool, None, current)
    found = [finding for check in FIRST_SIGHT_CHECKS.values() for finding in check(change)]
    worst = max(found, key=lambda finding: finding.severity.rank, default=None)
    return worst if worst is not None and worst.severity.rank >= DENY_FROM.rank else None


def poisoned_instructions(server: str, instructions: str) -> Finding | None:
    """The worst content finding, at `DENY_FROM` or above, of a server's instructions judged whole."""
    found, _ = judged(instructions_verdicts(server, None, instructions, first=True))
    worst = max(found, key=lambda finding: finding.severity.rank, default=None)
    return worst if worst is not None and worst.severity.rank >= DENY_FROM.rank else None


def _worst(change: ToolChange) -> Finding | None:
    return max(diff_changes([change]), key=lambda finding: finding.severity.rank, default=None)
