"""The rule catalog: every finding drift-monitor can raise, with its id, severity and meaning.

Tool rules are a small function each over one tool's old and new definition; the diff engine in
`monitor.core.diff` runs them. Server and session rules are raised by the poller and the service, and
are listed here so that the catalog (and the docs generated from it) is complete.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from monitor.core.listing import HINT_DEFAULTS, EffectiveHints, Tool, annotations_of, effective_hints
from monitor.core.text import describe_hidden, hidden_characters, make_visible, word_diff


class Severity(enum.StrEnum):
    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_ORDER.index(self)

    @classmethod
    def parse(cls, value: str) -> Severity:
        try:
            return cls(value.lower())
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown severity {value!r} (expected one of: {names})") from None


_SEVERITY_ORDER = (Severity.INFO, Severity.LOW, Severity.MEDIUM, Severity.HIGH, Severity.CRITICAL)


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    tool: str | None
    field: str | None
    old: Any
    new: Any
    message: str
    detail: Any = None
    """Rule-specific structure for reviewers: a word diff, a schema diff, raw annotation values."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity.value,
            "tool": self.tool,
            "field": self.field,
            "old": self.old,
            "new": self.new,
            "message": self.message,
            "detail": self.detail,
        }


@dataclass
class ToolChange:
    """One tool's definition before and after; either side is None when it was added or removed."""

    name: str
    old: Tool | None
    new: Tool | None

    @cached_property
    def old_hints(self) -> EffectiveHints:
        return effective_hints(self.old or {})

    @cached_property
    def new_hints(self) -> EffectiveHints:
        return effective_hints(self.new or {})

    @property
    def both(self) -> tuple[Tool, Tool] | None:
        return (self.old, self.new) if self.old is not None and self.new is not None else None

    def label(self) -> str:
        return make_visible(self.name)


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
            old=old,
            new=new,
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


def _hint_detail(change: ToolChange, hint: str) -> dict[str, Any]:
    old_annotations = annotations_of(change.old or {}) or {}
    new_annotations = annotations_of(change.new or {}) or {}
    return {
        "raw_old": old_annotations.get(hint),
        "raw_new": new_annotations.get(hint),
        "declared_old": hint in change.old_hints.declared,
        "declared_new": hint in change.new_hints.declared,
    }


def _hint_flip(
    change: ToolChange, hint: str, old_value: bool, *, write_only: bool = False
) -> tuple[bool, bool] | None:
    """(old, new) effective values when `hint` flipped away from `old_value` and the hint applies."""
    if change.both is None:
        return None
    if write_only and not (change.old_hints.applies(hint) and change.new_hints.applies(hint)):
        return None
    old, new = change.old_hints.get(hint), change.new_hints.get(hint)
    return (old, new) if old == old_value and new != old_value else None


def _write_profile(hints: EffectiveHints) -> str:
    destructive = "destructive" if hints.destructiveHint else "non-destructive"
    idempotent = "idempotent" if hints.idempotentHint else "not idempotent"
    return f"{destructive} and {idempotent}"


def _hint_rule(
    rule_id: str, severity: Severity, hint: str, old_value: bool, meaning: str, message: str
) -> None:
    """A rule for one effective hint flipping from `old_value`; `message` is formatted with the tool."""
    write_only = hint in ("destructiveHint", "idempotentHint")

    def check(change: ToolChange) -> Iterator[Finding]:
        flip = _hint_flip(change, hint, old_value, write_only=write_only)
        if flip is not None:
            text = message.format(tool=change.label())
            if hint == "readOnlyHint" and not flip[1]:
                text += f" It now reads as {_write_profile(change.new_hints)}."
            if hint not in change.new_hints.declared:
                text += f" ({hint} is no longer declared, so it reads as the default {HINT_DEFAULTS[hint]})."
            yield CATALOG[rule_id].finding(
                change, f"annotations.{hint}", flip[0], flip[1], text, detail=_hint_detail(change, hint)
            )

    rule(rule_id, severity, meaning)(check)


_hint_rule(
    "read-only-revoked",
    Severity.CRITICAL,
    "readOnlyHint",
    True,
    "The tool was read-only and now may write, while hosts that cached the old listing still treat it "
    "as a read.",
    "{tool} is no longer read-only: it may now write, while hosts that cached the old listing still "
    "call it without confirmation.",
)
_hint_rule(
    "read-only-claimed",
    Severity.HIGH,
    "readOnlyHint",
    False,
    "A tool that could write now claims to be read-only and asks to be called without a gate.",
    "{tool} now claims to be read-only, so hosts will stop asking before calling it.",
)
_hint_rule(
    "destructive-added",
    Severity.HIGH,
    "destructiveHint",
    False,
    "A writing tool that was declared non-destructive may now destroy data.",
    "{tool} may now perform destructive updates.",
)
_hint_rule(
    "destructive-removed",
    Severity.HIGH,
    "destructiveHint",
    True,
    "A writing tool that was destructive now claims it is not, asking for less friction.",
    "{tool} no longer declares itself destructive, so hosts may stop confirming its calls.",
)
_hint_rule(
    "idempotent-revoked",
    Severity.HIGH,
    "idempotentHint",
    True,
    "The tool was safe to repeat and no longer is: hosts that retry on timeout would repeat an effect.",
    "{tool} is no longer idempotent: a host that retries it after a timeout would repeat its effect.",
)
_hint_rule(
    "idempotent-claimed",
    Severity.MEDIUM,
    "idempotentHint",
    False,
    "The tool now claims it is safe to repeat, so hosts may start retrying it.",
    "{tool} now claims to be idempotent, so hosts may retry it automatically.",
)
_hint_rule(
    "open-world-added",
    Severity.MEDIUM,
    "openWorldHint",
    False,
    "The tool now reaches outside its own closed domain (the internet, other people's systems).",
    "{tool} now interacts with an open world of external entities.",
)
_hint_rule(
    "open-world-removed",
    Severity.LOW,
    "openWorldHint",
    True,
    "The tool now claims to stay inside a closed domain.",
    "{tool} no longer declares that it reaches an open world of external entities.",
)


@rule(
    "annotations-removed",
    Severity.MEDIUM,
    "The tool had an annotations object and now has none, so it reads with the pessimistic defaults.",
)
def _annotations_removed(change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old = annotations_of(change.both[0])
    if old is not None and annotations_of(change.both[1]) is None:
        yield CATALOG["annotations-removed"].finding(
            change,
            "annotations",
            old,
            change.both[1].get("annotations"),
            f"{change.label()} dropped its annotations object; every hint now reads as its default.",
        )


_TEXT_FIELDS = ("description", "title", "annotations.title")


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
    "hidden-text-in-description",
    Severity.HIGH,
    "The description or title gained characters a reader cannot see (zero-width, bidi controls, Unicode "
    "tags, other format characters), a way to hide instructions from reviewers but not from models.",
)
def _hidden_text(change: ToolChange) -> Iterator[Finding]:
    if change.new is None:
        return
    for path in _TEXT_FIELDS:
        added = hidden_characters(_text_field(change.new, path)) - hidden_characters(
            _text_field(change.old, path)
        )
        if added:
            yield CATALOG["hidden-text-in-description"].finding(
                change,
                path,
                None,
                make_visible(_text_field(change.new, path)),
                f"The {path} of {change.label()} now contains invisible characters: "
                f"{describe_hidden(added)}.",
                detail={"codepoints": [f"U+{ord(c):04X}" for c in sorted(added)]},
            )


@rule(
    "description-changed",
    Severity.LOW,
    "The description text changed; the finding carries a word diff.",
)
def _description_changed(change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old, new = (tool.get("description") for tool in change.both)
    if not _same_json(old, new):
        old_text = old if isinstance(old, str) else ""
        new_text = new if isinstance(new, str) else ""
        yield CATALOG["description-changed"].finding(
            change,
            "description",
            old,
            new,
            f"The description of {change.label()} changed.",
            detail={"word_diff": [list(op) for op in word_diff(old_text, new_text)]},
        )


@rule("title-changed", Severity.INFO, "The tool's title or annotations.title changed.")
def _title_changed(change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    for path in ("title", "annotations.title"):
        old, new = (_raw_field(tool, path) for tool in change.both)
        if not _same_json(old, new):
            yield CATALOG["title-changed"].finding(
                change, path, old, new, f"The {path} of {change.label()} changed."
            )


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
def _required_added(change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old_schema, new_schema = (tool.get("inputSchema") for tool in change.both)
    old_required = set(_required(old_schema))
    for name in _required(new_schema):
        if name not in old_required:
            yield CATALOG["required-argument-added"].finding(
                change,
                "inputSchema.required",
                None,
                name,
                f"{change.label()} now requires the argument {make_visible(name)!r}.",
            )


def schema_diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """Leaf-level changes between two JSON values, as {path, old, new} rows a person can read."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        rows: list[dict[str, Any]] = []
        for key in sorted(set(old) | set(new), key=str):
            child = f"{path}.{key}" if path else str(key)
            if key not in old:
                rows.append({"path": child, "op": "added", "new": new[key]})
            elif key not in new:
                rows.append({"path": child, "op": "removed", "old": old[key]})
            else:
                rows.extend(schema_diff(old[key], new[key], child))
        return rows
    if _same_json(old, new):
        return []
    return [{"path": path or "(root)", "op": "changed", "old": old, "new": new}]


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: Python's `==` conflates true with 1, which schemas keep apart."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@rule(
    "input-schema-changed",
    Severity.LOW,
    "The input schema changed in a way other than gaining a required property.",
)
def _input_schema_changed(change: ToolChange) -> Iterator[Finding]:
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
        yield CATALOG["input-schema-changed"].finding(
            change,
            "inputSchema",
            old,
            new,
            f"The input schema of {change.label()} changed ({_summary(rows)}).",
            detail={"schema_diff": rows},
        )


def _drop(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != key}


def _summary(rows: list[dict[str, Any]]) -> str:
    shown = ", ".join(f"{row['path']} {row['op']}" for row in rows[:3])
    return shown + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")


@rule("output-schema-changed", Severity.LOW, "The output schema changed, was added or was removed.")
def _output_schema_changed(change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old, new = (tool.get("outputSchema") for tool in change.both)
    if not _same_json(old, new):
        rows = schema_diff(old, new)
        yield CATALOG["output-schema-changed"].finding(
            change,
            "outputSchema",
            old,
            new,
            f"The output schema of {change.label()} changed ({_summary(rows)}).",
            detail={"schema_diff": rows},
        )


@rule(
    "tool-added",
    Severity.INFO,
    "A new tool appeared; medium when its effective hints say it writes destructively.",
)
def _tool_added(change: ToolChange) -> Iterator[Finding]:
    if change.old is None and change.new is not None:
        hints = change.new_hints
        if hints.writes_destructively:
            declared = "declares" if {"readOnlyHint", "destructiveHint"} <= hints.declared else "reads as"
            message = f"New tool {change.label()} {declared} a destructive write."
            severity = Severity.MEDIUM
        else:
            message = f"New tool {change.label()}."
            severity = None
        yield CATALOG["tool-added"].finding(change, None, None, None, message, severity=severity)


@rule("tool-removed", Severity.LOW, "A tool disappeared from the listing.")
def _tool_removed(change: ToolChange) -> Iterator[Finding]:
    if change.old is not None and change.new is None:
        yield CATALOG["tool-removed"].finding(change, None, None, None, f"Tool {change.label()} was removed.")


_RULED_KEYS = frozenset(
    {"name", "description", "title", "inputSchema", "outputSchema", "annotations", "_meta"}
)


@rule(
    "definition-changed",
    Severity.INFO,
    "Something no other rule covers changed: a vendor or unknown field, or a raw annotation value "
    "whose effective meaning stayed the same.",
)
def _definition_changed(change: ToolChange) -> Iterator[Finding]:
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
        elif key in _RULED_KEYS and not _same_json(old, new):
            continue
        yield _other_change(change, key, old, new)
    old_ann = annotations_of(old_tool) or {}
    new_ann = annotations_of(new_tool) or {}
    for key in sorted(set(old_ann) | set(new_ann)):
        if key == "title" or not _differs(old_ann, new_ann, key):
            continue
        if key in HINT_DEFAULTS and _hint_effect_changed(change, key):
            continue
        yield _other_change(change, f"annotations.{key}", old_ann.get(key), new_ann.get(key))


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


def _other_change(change: ToolChange, path: str, old: Any, new: Any) -> Finding:
    return CATALOG["definition-changed"].finding(
        change, path, old, new, f"{path} of {change.label()} changed without changing what hosts act on."
    )


for _server_rule in (
    Rule(
        "server-unreachable",
        Severity.HIGH,
        "Several consecutive polls of the server failed; resolved by the next successful poll.",
        "server",
    ),
    Rule(
        "listing-changed-silently",
        Severity.HIGH,
        "The listing changed but the monitor's long-lived watch session got no list-changed "
        "notification, so hosts holding long-lived sessions stay stale.",
        "server",
    ),
    Rule(
        "session-stale",
        Severity.HIGH,
        "A registered host session still holds an older listing than the server's current one, past "
        "the grace period; its severity is that of the worst change it missed.",
        "session",
    ),
    Rule(
        "session-long-lived",
        Severity.LOW,
        "A registered host session has been open longer than the configured maximum age.",
        "session",
    ),
):
    CATALOG[_server_rule.id] = _server_rule


TOOL_RULES: tuple[Rule, ...] = tuple(r for r in CATALOG.values() if r.scope == "tool")
