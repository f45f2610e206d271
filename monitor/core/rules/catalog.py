"""The catalog: every rule with its id, severity and meaning, and for tool rules a check function."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from monitor.core.findings import Finding, Severity, ToolChange, kept_value

Check = Callable[[ToolChange], Iterator[Finding]]
Scope = Literal["tool", "server", "session"]


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    meaning: str
    scope: Scope = "tool"
    check: Check | None = field(default=None, compare=False, repr=False)

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
