"""The rule catalog: every finding drift-monitor can raise, with its id, severity and meaning.

Tool rules are a small function each over one tool's old and new definition (`annotations`, `content`);
the diff engine in `monitor.core.diff` runs them. Server and session rules (`servers`) are raised
by the poll transaction and the host-session checker. Importing this package registers them all
in the order of the generated docs (the modules import alphabetically: keep it so).
"""

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.rules import annotations as _annotations  # noqa: F401 - registers the annotation rules
from monitor.core.rules import content as _content  # noqa: F401 - registers the content rules
from monitor.core.rules import listings as _listings  # noqa: F401 - registers whole-listing rules
from monitor.core.rules import metas as _metas  # noqa: F401 - registers the _meta rule
from monitor.core.rules import renames as _renames  # noqa: F401 - registers the look-alike rename rule
from monitor.core.rules import servers as _servers  # noqa: F401 - registers server and session rules
from monitor.core.rules import views as _views  # noqa: F401 - registers the client-view rules
from monitor.core.rules.catalog import CATALOG, Check, Rule, Scope
from monitor.core.rules.content import iter_schema_diff, schema_diff

TOOL_RULES: tuple[Rule, ...] = tuple(r for r in CATALOG.values() if r.scope == "tool")
ABOUT_A_TOOL: tuple[Rule, ...] = tuple(r for r in CATALOG.values() if r.scope in ("tool", "listing"))
"""Rules whose findings name one tool of a diff: the tool rules and the listing-wide ones."""

__all__ = [
    "ABOUT_A_TOOL",
    "CATALOG",
    "TOOL_RULES",
    "Check",
    "Finding",
    "Rule",
    "Scope",
    "Severity",
    "ToolChange",
    "iter_schema_diff",
    "schema_diff",
]
