"""`tool-renamed-lookalike`: a tool removed and another added under a name that looks the same.

Tool rules see one name at a time, so a read-only `read_file` replaced by a destructive
`reаd_file` (Cyrillic `а`) would read as a low `tool-removed` and a medium `tool-added`, and the
two messages would print the same-looking name twice. This rule pairs them (`monitor.core.confusable`)
and shows both names with every character outside printable ASCII as its code point.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from monitor.core.confusable import confusable, differing_characters, escaped
from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.listing import EffectiveHints
from monitor.core.rules.catalog import Rule, rule


def _reads(hints: EffectiveHints) -> str:
    if hints.readOnlyHint:
        return "read-only"
    return "a destructive write" if hints.destructiveHint else "a non-destructive write"


@rule(
    "tool-renamed-lookalike",
    Severity.HIGH,
    "A tool was removed and one added whose name looks the same (TR39 confusables, case, invisible "
    "or space characters): people and models take it for the old one. Both names are shown escaped.",
    scope="listing",
)
def renamed_lookalikes(rule: Rule, changes: Iterable[ToolChange]) -> Iterator[Finding]:
    """One finding per (removed, added) pair of confusable names, on the added tool."""
    changes = list(changes)
    removed = [change for change in changes if change.old is not None and change.new is None]
    added = [change for change in changes if change.old is None and change.new is not None]
    for new in added:
        for old in removed:
            if not confusable(old.name, new.name):
                continue
            characters = differing_characters(old.name, new.name)
            shown = f" ({'; '.join(characters)})" if characters else " (they differ in case)"
            yield rule.finding(
                new,
                "name",
                old.name,
                new.name,
                f"Tool {escaped(old.name)} was removed and {escaped(new.name)} added: the names look "
                f"alike{shown}, so hosts and people take the new tool for the old one. The old one was "
                f"{_reads(old.old_hints)}; the new one is {_reads(new.new_hints)}.",
                detail={
                    "removed": old.name,
                    "added": new.name,
                    "removed_escaped": escaped(old.name),
                    "added_escaped": escaped(new.name),
                    "characters": characters,
                },
            )
