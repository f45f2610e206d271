"""The catalog: every rule with its id, severity and meaning, and for tool rules a check function."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from monitor.core.findings import Finding, Severity, ToolChange, kept_value

Check = Callable[[ToolChange], Iterator[Finding]]
Scope = Literal["tool", "listing", "server", "session"]
"""`listing`: raised over all of one diff's tool changes at once, about one tool (no `check`)."""


@dataclass(frozen=True)
class PollFacts:
    """What one recorded poll of a server shows, for the server rules that clear on a poll."""

    answered: bool
    """The server answered with a listing (the poll succeeded)."""
    was_failing: bool
    """The server's previous poll had failed."""
    new_version: bool
    raised: frozenset[str]
    """The rules this poll raised."""
    announced: bool | None = None
    """For a new version: whether the monitor's watch session was told of it (None: none covered it)."""
    listen_honored: bool | None = None
    """For a watch session's `subscriptions/listen` acknowledgement: whether it keeps `toolsListChanged`."""


Clears = Callable[[PollFacts], bool]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    meaning: str
    scope: Scope = "tool"
    check: Check | None = field(default=None, compare=False, repr=False)
    clears: Clears | None = field(default=None, compare=False, repr=False)
    """For a server rule whose alert a poll can end: whether this poll shows the condition gone."""

    def finding(
        self,
        change: ToolChange | None,
        field: str | None,
        old: Any,
        new: Any,
        message: str,
        *,
        detail: Any = None,
        severity: Severity | None = None,
    ) -> Finding:
        return Finding(
            rule=self.id,
            severity=severity or self.severity,
            tool=change.name if change else None,
            field=field,
            old=kept_value(old),
            new=kept_value(new),
            message=message,
            detail=detail,
        )


CATALOG: dict[str, Rule] = {}


def rule(rule_id: str, severity: Severity, meaning: str) -> Callable[[Check], Check]:
    """Register a tool rule: the decorated function yields the findings of one tool change."""

    def register(check: Check) -> Check:
        CATALOG[rule_id] = Rule(rule_id, severity, meaning, "tool", check)
        return check

    return register
