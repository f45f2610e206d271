"""The rule on what different clients are shown: `listing-varies-by-client` (its alerts end per tool,
once every view shows the tool alike again).

Two client profiles of one server (different clientInfo or declared capabilities) may get
different listings. That is lawful, but a host sees a listing the monitor's primary view does
not, and one laxer on readOnlyHint or destructiveHint for the same tool is a server that shows
the monitor a safer listing than it shows hosts: cloaking.
"""

from __future__ import annotations

from collections.abc import Iterator

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.fingerprint import CanonicalListing
from monitor.core.listing import effective_hints
from monitor.core.rules.catalog import Rule, rule
from monitor.core.text import make_visible

SAFETY_HINTS = ("readOnlyHint", "destructiveHint")


@rule(
    "listing-varies-by-client",
    Severity.MEDIUM,
    "Two client profiles of one server get different listings; high when one view is laxer on "
    "readOnlyHint or destructiveHint for a tool, or when both declare the same capabilities (told "
    "apart by identity alone).",
    scope="server",
)
def views_differ(
    rule: Rule,
    server: str,
    base_view: str,
    base: CanonicalListing,
    other_view: str,
    other: CanonicalListing,
    *,
    same_capabilities: bool = False,
) -> Iterator[Finding]:
    """One finding per tool that two views of `server` show differently (`old`: the base view's value).
    `same_capabilities`: the two profiles declared the same capabilities, so only their identity
    (clientInfo, User-Agent) tells them apart, and any difference is high."""
    for name in sorted(base.forms.keys() | other.forms.keys()):
        if base.forms.get(name) == other.forms.get(name):
            continue
        label = make_visible(name)
        tool = ToolChange(name, None, None)
        detail: dict[str, object] = {"views": [base_view, other_view]}
        if name not in other.forms or name not in base.forms:
            shown, hidden = (base_view, other_view) if name in base.forms else (other_view, base_view)
            detail["only_in"] = shown
            yield rule.finding(
                tool,
                "tools",
                name in base.forms,
                name in other.forms,
                f"{server} lists {label} to client {shown!r} but not to {hidden!r}."
                + _by_identity(same_capabilities),
                detail=detail,
                severity=Severity.HIGH if same_capabilities else None,
            )
            continue
        old, new = effective_hints(base.tools[name]), effective_hints(other.tools[name])
        differing = {
            hint: {base_view: old.get(hint), other_view: new.get(hint)}
            for hint in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
            if old.get(hint) != new.get(hint) and (old.applies(hint) or new.applies(hint))
        }
        detail["annotations"] = differing
        lax = [hint for hint in SAFETY_HINTS if hint in differing]
        if lax:
            hint = lax[0]
            laxer, stricter = (
                (base_view, other_view) if _laxer(hint, old.get(hint)) else (other_view, base_view)
            )
            message = (
                f"{server} shows {label} to client {laxer!r} with {hint}={str(_lax_value(hint)).lower()} "
                f"but not to {stricter!r}: a server that shows one client a safer listing than another "
                "is cloaking."
            )
            yield rule.finding(
                tool,
                f"annotations.{hint}",
                old.get(hint),
                new.get(hint),
                message,
                detail=detail,
                severity=Severity.HIGH,
            )
            continue
        first = next(iter(differing), None)
        yield rule.finding(
            tool,
            f"annotations.{first}" if first else None,
            old.get(first) if first else None,
            new.get(first) if first else None,
            f"{server} shows {label} differently to clients {base_view!r} and {other_view!r} "
            f"({', '.join(differing) or 'its definition'}).{_by_identity(same_capabilities)}",
            detail=detail,
            severity=Severity.HIGH if same_capabilities else None,
        )


def _by_identity(same_capabilities: bool) -> str:
    if not same_capabilities:
        return ""
    return (
        " Both declare the same capabilities: a server that tells clients apart by name or User-Agent "
        "alone is cloaking."
    )


def _lax_value(hint: str) -> bool:
    """The value of a safety hint that asks hosts for less friction."""
    return hint == "readOnlyHint"


def _laxer(hint: str, value: bool) -> bool:
    return value == _lax_value(hint)
