"""The rule catalog: every finding drift-monitor can raise, with its id, severity and meaning.

Each rule is a small function registered with `@rule` in the module of its kind (`catalog` says how):
hints (`annotations`), text and schemas (`content`), what text asks of the model (`poisoning`), the
listing as a whole (`listings`, `renames`),
`_meta` (`metas`), client views (`views`), servers and host sessions (`servers`). Importing this
package imports them all, so `CATALOG` is whole; the docs list it in `documented_order`.
"""

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.rules import annotations as _annotations  # noqa: F401 - registers the annotation rules
from monitor.core.rules import content as _content  # noqa: F401 - registers the content rules
from monitor.core.rules import listings as _listings  # noqa: F401 - registers whole-listing rules
from monitor.core.rules import metas as _metas  # noqa: F401 - registers the _meta rule
from monitor.core.rules import poisoning as _poisoning  # noqa: F401 - registers the model-visible text rules
from monitor.core.rules import renames as _renames  # noqa: F401 - registers the look-alike rename rule
from monitor.core.rules import servers as _servers  # noqa: F401 - registers server and session rules
from monitor.core.rules import views as _views  # noqa: F401 - registers the client-view rules
from monitor.core.rules.catalog import (
    CATALOG,
    Rule,
    Scope,
    documented_order,
    first_sight_checks,
    listing_checks,
    tool_checks,
)
from monitor.core.rules.content import iter_schema_diff, schema_diff

TOOL_RULES: tuple[Rule, ...] = tuple(r for r in CATALOG.values() if r.scope == "tool")
ABOUT_A_TOOL: tuple[Rule, ...] = tuple(r for r in CATALOG.values() if r.scope in ("tool", "listing"))
"""Rules whose findings name one tool of a diff: the tool rules and the listing-wide ones."""
TOOL_CHECKS = tool_checks()
"""Each tool rule's function by rule id: what the diff engine runs over every changed tool."""
FIRST_SIGHT_CHECKS = first_sight_checks()
"""The tool rules that also judge a tool seen for the first time (a server's first listing)."""
LISTING_CHECKS = listing_checks()
"""Each listing rule's function by rule id: what the diff engine runs over all of a diff's changes."""

__all__ = [
    "ABOUT_A_TOOL",
    "CATALOG",
    "FIRST_SIGHT_CHECKS",
    "LISTING_CHECKS",
    "TOOL_CHECKS",
    "TOOL_RULES",
    "Finding",
    "Rule",
    "Scope",
    "Severity",
    "ToolChange",
    "documented_order",
    "iter_schema_diff",
    "schema_diff",
]
