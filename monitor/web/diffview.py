"""What a reviewer sees of a changed tool: findings, hints old -> new, text, word and schema diffs.

Built from `monitor.store.queries`' ToolChangeView for the diff and tool pages; hints are shown as
the effective values hosts act on, each marked declared or the specification's default.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any

from monitor.core.listing import HINT_DEFAULTS, annotations_of, effective_hints
from monitor.core.rules import iter_schema_diff
from monitor.core.text import word_diff
from monitor.store.queries import ToolChangeView
from monitor.web.filters import compact_json

HINT_LABELS = {
    "readOnlyHint": "read-only",
    "destructiveHint": "destructive",
    "idempotentHint": "idempotent",
    "openWorldHint": "open world",
}


@dataclass(frozen=True)
class HintBadge:
    hint: str
    label: str
    value: bool
    declared: bool
    applies: bool
    raw: Any


def hint_badges(tool: Mapping[str, Any]) -> list[HintBadge]:
    """The tool's effective hints, each marked declared or default, and n/a where hosts ignore it."""
    hints = effective_hints(tool)
    raw = annotations_of(tool) or {}
    return [
        HintBadge(h, HINT_LABELS[h], hints.get(h), h in hints.declared, hints.applies(h), raw.get(h))
        for h in HINT_DEFAULTS
    ]


@dataclass(frozen=True)
class HintChange:
    label: str
    old: HintBadge | None
    new: HintBadge | None

    @property
    def effective_changed(self) -> bool:
        """Whether hosts act differently: a hint that applies on neither side changed nothing."""
        if self.old is None or self.new is None:
            return True
        if self.not_applicable:
            return False
        return (self.old.value, self.old.applies) != (self.new.value, self.new.applies)

    @property
    def not_applicable(self) -> bool:
        """The hint means nothing on either side (the tool is read-only before and after)."""
        return self.old is not None and self.new is not None and not self.old.applies and not self.new.applies

    @property
    def raw_changed(self) -> bool:
        if self.old is None or self.new is None:
            return True
        return (
            compact_json(self.old.raw) != compact_json(self.new.raw) or self.old.declared != self.new.declared
        )


@dataclass(frozen=True)
class FieldChange:
    label: str
    old: Any
    new: Any


@dataclass
class ToolDiffView:
    """What a reviewer needs for one changed tool: findings, hints old -> new, text and schema diffs."""

    change: ToolChangeView
    hints: list[HintChange]
    texts: list[FieldChange]
    description: list[tuple[str, str]] | None
    schemas: list[tuple[str, list[dict[str, Any]]]]
    others: list[dict[str, Any]]
    hidden_rows: dict[str, int | None] = field(default_factory=dict)
    """Rows of each schema table (and "others") left out past `ROWS_SHOWN`; None when there are more
    but they were not counted (a change no finding describes is walked only as far as it is shown)."""

    @property
    def only(self) -> Mapping[str, Any] | None:
        """The one definition of an added or removed tool, shown whole instead of as a diff."""
        if self.change.old is None or self.change.new is None:
            return self.change.new if self.change.new is not None else self.change.old
        return None

    @property
    def only_badges(self) -> list[HintBadge]:
        return hint_badges(self.only) if self.only is not None else []

    @property
    def status(self) -> str:
        if self.change.old is None and self.change.new is not None:
            return "added"
        if self.change.new is None and self.change.old is not None:
            return "removed"
        return "changed"


ROWS_SHOWN = 200
"""Most rows of one schema-change table a page shows; the rest are counted, and the whole definitions
are a link away (a hostile schema may change 100,000 properties at once)."""

_SHOWN_KEYS = frozenset(
    {"name", "title", "description", "annotations", "inputSchema", "outputSchema", "_meta"}
)


def tool_diff_view(change: ToolChangeView) -> ToolDiffView:
    old, new = change.old, change.new
    old_badges = {b.hint: b for b in hint_badges(old)} if old is not None else {}
    new_badges = {b.hint: b for b in hint_badges(new)} if new is not None else {}
    hints = []
    if old is not None and new is not None:
        for h in HINT_DEFAULTS:
            row = HintChange(HINT_LABELS[h], old_badges[h], new_badges[h])
            if row.effective_changed or row.raw_changed:
                hints.append(row)
    texts: list[FieldChange] = []
    for label in ("title", "annotations.title") if old is not None and new is not None else ():
        before = _title_field(old, label)
        after = _title_field(new, label)
        if compact_json(before) != compact_json(after):
            texts.append(FieldChange(label, before, after))
    description = None
    if (
        old is not None
        and new is not None
        and compact_json(old.get("description")) != compact_json(new.get("description"))
    ):
        description = _word_diff_of(change, old.get("description"), new.get("description"))
    schemas: list[tuple[str, list[dict[str, Any]]]] = []
    hidden: dict[str, int | None] = {}
    others: list[dict[str, Any]] = []
    if old is not None and new is not None:
        for key in ("inputSchema", "outputSchema"):
            rows, more = _schema_rows(change, key)
            if rows:
                schemas.append((key, rows))
                hidden[key] = more
        others, hidden["others"] = _first_rows(
            iter_schema_diff(
                {k: v for k, v in old.items() if k not in _SHOWN_KEYS},
                {k: v for k, v in new.items() if k not in _SHOWN_KEYS},
            ),
            iter_schema_diff(_extra_annotations(old), _extra_annotations(new), "annotations"),
        )
        old_ann, new_ann = old.get("annotations"), new.get("annotations")
        if isinstance(old_ann, Mapping) != isinstance(new_ann, Mapping):
            others.append({"path": "annotations", "op": "changed", "old": old_ann, "new": new_ann})
    return ToolDiffView(change, hints, texts, description, schemas, others, hidden)


_SCHEMA_RULES = {"inputSchema": "input-schema-changed", "outputSchema": "output-schema-changed"}


def _schema_rows(change: ToolChangeView, key: str) -> tuple[list[dict[str, Any]], int | None]:
    """The rows shown for one schema and how many more there are, from the findings when the change
    has any: the rows were computed once, when the change was recorded (capped and counted there),
    and a page view must not walk a schema of 100,000 properties again. A change without findings
    (pruned, or stored before findings kept rows) is walked only as far as the page shows."""
    if change.findings:
        rows: list[dict[str, Any]] = []
        omitted = 0
        described = True
        for finding in change.findings:
            detail = finding.detail if isinstance(finding.detail, Mapping) else {}
            if finding.rule == _SCHEMA_RULES[key]:
                described = described and isinstance(detail.get("schema_diff"), list)
                rows += [dict(row) for row in detail.get("schema_diff") or () if isinstance(row, Mapping)]
                omitted += int(detail.get("schema_diff_omitted") or 0)
            elif finding.rule == "required-argument-added" and key == "inputSchema":
                rows.append({"path": "required", "op": "added", "new": [finding.new]})
        if described:
            return rows[:ROWS_SHOWN], max(0, len(rows) - ROWS_SHOWN) + omitted
    assert change.old is not None and change.new is not None
    return _first_rows(iter_schema_diff(change.old.get(key), change.new.get(key)))


def _first_rows(*tables: Iterator[dict[str, Any]]) -> tuple[list[dict[str, Any]], int | None]:
    """The first `ROWS_SHOWN` rows of the tables in turn, and 0 (none left) or None (more, uncounted)."""
    rows = list(islice(chain(*tables), ROWS_SHOWN + 1))
    return rows[:ROWS_SHOWN], None if len(rows) > ROWS_SHOWN else 0


def _title_field(tool: Mapping[str, Any] | None, path: str) -> Any:
    if tool is None:
        return None
    if path == "annotations.title":
        return (annotations_of(tool) or {}).get("title")
    return tool.get(path)


def _extra_annotations(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Annotation keys other than the four hints and the title (vendor extensions)."""
    return {k: v for k, v in (annotations_of(tool) or {}).items() if k not in HINT_DEFAULTS and k != "title"}


def _word_diff_of(change: ToolChangeView, old: Any, new: Any) -> list[tuple[str, str]]:
    """The description-changed finding's word diff when present, else the same function run here."""
    for finding in change.findings:
        if finding.rule == "description-changed" and isinstance(finding.detail, Mapping):
            ops = finding.detail.get("word_diff")
            if isinstance(ops, list) and all(isinstance(op, list) and len(op) == 2 for op in ops):
                return [(str(op), str(text)) for op, text in ops]
    return list(word_diff(old if isinstance(old, str) else "", new if isinstance(new, str) else ""))
