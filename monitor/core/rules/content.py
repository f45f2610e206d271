"""Rules on what a tool says and takes: text, schemas, presence, everything else (what its text asks of the
model is `poisoning`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.listing import HINT_DEFAULTS, Tool, annotations_of
from monitor.core.rules.catalog import Rule, rule
from monitor.core.text import make_visible, word_diff


def _raw_field(tool: Tool | None, path: str) -> Any:
    """The value at `description`, `title` or `annotations.title`, None when absent."""
    if tool is None:
        return None
    if path == "annotations.title":
        return (annotations_of(tool) or {}).get("title")
    return tool.get(path)


def _text_field(tool: Tool | None, path: str) -> str:
    value = _raw_field(tool, path)
    return value if isinstance(value, str) else ""


@rule(
    "description-changed",
    Severity.LOW,
    "The description text changed; the finding carries a word diff.",
)
def _description_changed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old, new = (tool.get("description") for tool in change.both)
    if not _same_json(old, new):
        old_text = old if isinstance(old, str) else ""
        new_text = new if isinstance(new, str) else ""
        yield rule.finding(
            change,
            "description",
            old,
            new,
            f"The description of {change.label()} changed.",
            detail={"word_diff": [list(op) for op in word_diff(old_text, new_text)]},
        )


@rule("title-changed", Severity.INFO, "The tool's title or annotations.title changed.")
def _title_changed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    for path in ("title", "annotations.title"):
        old, new = (_raw_field(tool, path) for tool in change.both)
        if not _same_json(old, new):
            yield rule.finding(change, path, old, new, f"The {path} of {change.label()} changed.")


def _required(schema: Any) -> list[str]:
    if not isinstance(schema, Mapping):
        return []
    required = schema.get("required")
    if not isinstance(required, list):
        return []
    return [name for name in required if isinstance(name, str)]


@rule(
    "required-argument-added",
    Severity.MEDIUM,
    "The input schema gained a required property: existing callers' arguments may now be rejected.",
)
def _required_added(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old_schema, new_schema = (tool.get("inputSchema") for tool in change.both)
    old_required = set(_required(old_schema))
    for name in _required(new_schema):
        if name not in old_required:
            yield rule.finding(
                change,
                "inputSchema.required",
                None,
                name,
                f"{change.label()} now requires the argument {make_visible(name)!r}.",
            )


def schema_diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """Leaf-level changes between two JSON values, as {path, old, new} rows a person can read."""
    return list(iter_schema_diff(old, new, path))


def iter_schema_diff(old: Any, new: Any, path: str = "") -> Iterator[dict[str, Any]]:
    """`schema_diff`'s rows one at a time, in the same order: a page that shows the first few rows of
    a change no finding describes stops after them instead of building 100,000 rows."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            child = f"{path}.{key}" if path else str(key)
            if key not in old:
                yield {"path": child, "op": "added", "new": new[key]}
            elif key not in new:
                yield {"path": child, "op": "removed", "old": old[key]}
            else:
                yield from iter_schema_diff(old[key], new[key], child)
    elif not _same_json(old, new):
        yield {"path": path or "(root)", "op": "changed", "old": old, "new": new}


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: Python's `==` conflates true with 1 (and 1 with 1.0), which schemas keep apart.

    Compared in place, without serialising: rules compare whole schemas, which a server may make
    megabytes large, and serialising both sides for every rule cost seconds on the writer's thread.
    """
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[key], y[key]) for key in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


SCHEMA_ROWS_KEPT = 500
"""Most schema-change rows a finding keeps; the rest are counted (`schema_diff_omitted`). A hostile
schema may change 100,000 properties at once, and every API response must stay a few MB."""


def _schema_detail(rows: list[dict[str, Any]]) -> dict[str, Any]:
    detail: dict[str, Any] = {"schema_diff": rows[:SCHEMA_ROWS_KEPT]}
    if len(rows) > SCHEMA_ROWS_KEPT:
        detail["schema_diff_omitted"] = len(rows) - SCHEMA_ROWS_KEPT
    return detail


@rule(
    "input-schema-changed",
    Severity.LOW,
    "The input schema changed in a way other than gaining a required property.",
)
def _input_schema_changed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old, new = (tool.get("inputSchema") for tool in change.both)
    if _same_json(old, new):
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        # Added required names belong to required-argument-added; everything else is ours.
        rows = schema_diff(_drop(old, "required"), _drop(new, "required"))
        if removed := sorted(set(_required(old)) - set(_required(new))):
            rows.append({"path": "required", "op": "removed", "old": removed})
    else:
        rows = schema_diff(old, new)
    if rows:
        yield rule.finding(
            change,
            "inputSchema",
            old,
            new,
            f"The input schema of {change.label()} changed ({_summary(rows)}).",
            detail=_schema_detail(rows),
        )


def _drop(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def _summary(rows: list[dict[str, Any]]) -> str:
    shown = ", ".join(f"{row['path']} {row['op']}" for row in rows[:3])
    return shown + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")


@rule("output-schema-changed", Severity.LOW, "The output schema changed, was added or was removed.")
def _output_schema_changed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old, new = (tool.get("outputSchema") for tool in change.both)
    if not _same_json(old, new):
        rows = schema_diff(old, new)
        yield rule.finding(
            change,
            "outputSchema",
            old,
            new,
            f"The output schema of {change.label()} changed ({_summary(rows)}).",
            detail=_schema_detail(rows),
        )


@rule(
    "tool-added",
    Severity.INFO,
    "A new tool appeared; medium when its effective hints say it writes destructively.",
)
def _tool_added(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.old is None and change.new is not None:
        hints = change.new_hints
        if hints.writes_destructively:
            declared = "declares" if {"readOnlyHint", "destructiveHint"} <= hints.declared else "reads as"
            message = f"New tool {change.label()} {declared} a destructive write."
            severity = Severity.MEDIUM
        else:
            message = f"New tool {change.label()}."
            severity = None
        yield rule.finding(change, None, None, None, message, severity=severity)


@rule("tool-removed", Severity.LOW, "A tool disappeared from the listing.")
def _tool_removed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.old is not None and change.new is None:
        yield rule.finding(change, None, None, None, f"Tool {change.label()} was removed.")


_RULED_KEYS = frozenset(
    {"name", "description", "title", "inputSchema", "outputSchema", "annotations", "_meta"}
)


@rule(
    "definition-changed",
    Severity.INFO,
    "Something no other rule covers changed: a vendor or unknown field, or a raw annotation value "
    "whose effective meaning stayed the same.",
)
def _definition_changed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old_tool, new_tool = change.both
    for key in sorted((set(old_tool) | set(new_tool)) - {"name", "_meta"}):
        if not _differs(old_tool, new_tool, key):
            continue
        old, new = old_tool.get(key), new_tool.get(key)
        # Ruled keys are someone else's, except where only their presence changed (absent vs null)
        # or where the annotations value is not an object that annotations-removed would explain.
        if key == "annotations":
            both_objects = isinstance(old, Mapping) and isinstance(new, Mapping)
            if both_objects or isinstance(old, Mapping):
                continue
            if isinstance(new, Mapping) and new:
                continue  # annotations first declared: each key is reported below, beside its own rule
        elif key in _RULED_KEYS and not _same_json(old, new):
            continue
        yield _other_change(rule, change, key, old, new)
    old_ann = annotations_of(old_tool) or {}
    new_ann = annotations_of(new_tool) or {}
    for key in sorted(set(old_ann) | set(new_ann)):
        if not _differs(old_ann, new_ann, key):
            continue
        if key == "title" and not _same_json(old_ann.get(key), new_ann.get(key)):
            continue  # title-changed's, unless only its presence changed (absent vs null)
        if key in HINT_DEFAULTS and _hint_effect_changed(change, key):
            continue
        yield _other_change(rule, change, f"annotations.{key}", old_ann.get(key), new_ann.get(key))


def _differs(old: Mapping[str, Any], new: Mapping[str, Any], key: str) -> bool:
    """A key added, removed or given another JSON value."""
    if (key in old) != (key in new):
        return True
    return not _same_json(old.get(key), new.get(key))


def _hint_effect_changed(change: ToolChange, hint: str) -> bool:
    """True when a host acts differently: the value flipped, or the hint began or ceased to apply."""
    old, new = change.old_hints, change.new_hints
    if old.applies(hint) != new.applies(hint):
        return True
    return old.applies(hint) and old.get(hint) != new.get(hint)


def _other_change(rule: Rule, change: ToolChange, path: str, old: Any, new: Any) -> Finding:
    return rule.finding(
        change, path, old, new, f"{path} of {change.label()} changed without changing what hosts act on."
    )
