"""The catalog: every rule with its id, severity and meaning, and the small function that raises it.

Every rule is registered one way, by decorating its function with `@rule(...)`. The function takes
its own `Rule` first (to make findings with it) and whatever it judges after that; what the
decorator returns is the function bound to its rule, called without it:

- a **tool** rule (`scope="tool"`) judges one changed tool (`ToolChange -> Iterator[Finding]`), and the
  diff engine runs every one of them over every changed tool;
- a **listing** rule (`scope="listing"`) judges all of one diff's changed tools at once (pairing a
  removed tool with an added one), and the diff engine runs it after the tool rules;
- a **server** or **session** rule is called, with the facts it needs as its own parameters, where
  its condition is seen (the poll transaction, the watch session, the host-session checker). It
  returns a `Finding`, or `rule.cleared()` when what it judged shows the condition gone (its alerts
  then resolve), or None. A server rule whose condition ends with a later poll in a way any poll
  shows (it answered again; a new version came without it) says so in `clears`, over `PollFacts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, cast

from monitor.core.findings import Finding, Severity, ToolChange, kept_value

Scope = Literal["tool", "listing", "server", "session"]
SCOPES: tuple[Scope, ...] = ("tool", "listing", "server", "session")


@dataclass(frozen=True)
class PollFacts:
    """What any recorded poll of a server shows, for the server rules that clear on a poll (`clears`)."""

    answered: bool
    """The server answered with a listing (the poll succeeded)."""
    was_failing: bool
    """The server's previous poll had failed."""
    new_version: bool
    raised: frozenset[str]
    """The rules this poll raised."""
    cleared: frozenset[Cleared] = frozenset()
    """What the rules' functions, called for this poll, judged gone (`Rule.cleared`)."""


Clears = Callable[[PollFacts], bool]


@dataclass(frozen=True)
class Cleared:
    """A rule's judgement that its condition is gone: the server's open alert of it (about `tool`,
    or about the server when None) resolves."""

    rule: str
    tool: str | None = None


Verdict = Finding | Cleared | None
"""What a server rule's function returns: the condition holds, is gone, or cannot be told."""


@dataclass(frozen=True)
class Rule:
    id: str
    severity: Severity
    meaning: str
    scope: Scope = "tool"
    clears: Clears | None = field(default=None, compare=False, repr=False)
    """For a server rule that any later poll can show ended: whether this poll does."""
    function: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    """The rule's function, bound to it (`rule`)."""
    family: str | None = None
    """Rules that judge one concern together (`poisoning`: model-visible text), listed together."""
    first_sight: bool = False
    """For a tool rule: also judged on every tool seen for the first time (a server's first listing)."""

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

    def cleared(self, tool: str | None = None) -> Cleared:
        return Cleared(self.id, tool)

    def ends_with(self, poll: PollFacts) -> bool:
        """Whether a recorded poll ends this rule's open alert about its server (a poll fact, `clears`)."""
        return self.clears is not None and self.clears(poll)


CATALOG: dict[str, Rule] = {}
"""Every rule by id. `monitor.core.rules` imports every rule module, so importing it fills this."""

Parameters = ParamSpec("Parameters")
Result = TypeVar("Result")


class Bound(Generic[Parameters, Result]):
    """A rule's function with its rule bound: called with the rest of its parameters."""

    rule: Rule

    def __init__(self, function: Callable[Concatenate[Rule, Parameters], Result]) -> None:
        self.function = function
        self.__doc__ = function.__doc__

    def __call__(self, *args: Parameters.args, **kwargs: Parameters.kwargs) -> Result:
        return self.function(self.rule, *args, **kwargs)


def rule(
    rule_id: str,
    severity: Severity,
    meaning: str,
    *,
    scope: Scope = "tool",
    clears: Clears | None = None,
    family: str | None = None,
    first_sight: bool = False,
) -> Callable[[Callable[Concatenate[Rule, Parameters], Result]], Bound[Parameters, Result]]:
    """Register a rule: its id, severity, one sentence of meaning, and the decorated function."""
    if scope != "server" and clears is not None:
        raise ValueError(f"{rule_id}: only a server rule ends with a later poll")
    if scope != "tool" and first_sight:
        raise ValueError(f"{rule_id}: only a tool rule judges tools seen for the first time")

    def register(function: Callable[Concatenate[Rule, Parameters], Result]) -> Bound[Parameters, Result]:
        if rule_id in CATALOG:
            raise ValueError(f"rule {rule_id!r} is registered twice")
        bound = Bound(function)
        made = Rule(rule_id, severity, meaning, scope, clears, bound, family, first_sight)
        bound.rule = CATALOG[rule_id] = made
        return bound

    return register


def tool_checks() -> dict[str, Callable[[ToolChange], Iterable[Finding]]]:
    """The tool rules' functions by rule id, in the catalog's order."""
    return {r.id: cast(Callable[[ToolChange], Iterable[Finding]], r.function) for r in _of("tool")}


def listing_checks() -> dict[str, Callable[[Sequence[ToolChange]], Iterable[Finding]]]:
    """The listing rules' functions by rule id, in the catalog's order."""
    return {
        r.id: cast(Callable[[Sequence[ToolChange]], Iterable[Finding]], r.function) for r in _of("listing")
    }


def _of(scope: Scope) -> Iterator[Rule]:
    return (r for r in CATALOG.values() if r.scope == scope and r.function is not None)


def judged(verdicts: Iterable[Verdict]) -> tuple[list[Finding], frozenset[Cleared]]:
    """The findings among rules' verdicts, and what they judged cleared."""
    findings: list[Finding] = []
    cleared: set[Cleared] = set()
    for verdict in verdicts:
        if isinstance(verdict, Finding):
            findings.append(verdict)
        elif isinstance(verdict, Cleared):
            cleared.add(verdict)
    return findings, frozenset(cleared)


def first_sight_checks() -> dict[str, Callable[[ToolChange], Iterable[Finding]]]:
    """The tool rules that also judge a tool seen for the first time, by rule id."""
    return {rule_id: check for rule_id, check in tool_checks().items() if CATALOG[rule_id].first_sight}


def documented_order(rules: Iterable[Rule]) -> list[Rule]:
    """Rules as the docs list them: by scope, a family's rules together (after the rest), then worst
    severity first, then by id."""
    return sorted(rules, key=lambda r: (SCOPES.index(r.scope), r.family or "", -r.severity.rank, r.id))
