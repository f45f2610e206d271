"""What a rule reports (a finding, with its severity) and what tool rules look at (a tool change).

A finding is the one record shape every producer hands on: the diff engine, the poll's server
rules and the host-session checker; storage, the API, pages and webhooks read it.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from monitor.core.listing import EffectiveHints, Tool, effective_hints
from monitor.core.modeltext import Added, added_texts
from monitor.core.poison import Kind, Signal, signals
from monitor.core.text import make_visible


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

VALUE_KEPT = 64 * 1024
"""Most bytes of compact JSON a finding keeps as its `old` or `new`. A hostile server may send a
3 MB schema; a finding that kept it whole on both sides would be stored, served by the API, sent in
webhooks and read back by pages at that size, for every change."""


def kept_value(value: Any) -> Any:
    """`value`, or past `VALUE_KEPT` an explicit marker in its place: an object whose `$omitted` says
    why, with the value's size and the SHA-256 of its compact sorted-key JSON (so two different large
    values never read as the same one; the whole value is in the tool's stored definition)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) < 4096:  # at most 6 bytes a character as JSON: well under
        return value
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= VALUE_KEPT:
        return value
    return {
        "$omitted": f"a JSON value of {len(data):,} bytes, over the {VALUE_KEPT:,} a finding keeps",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


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

    @cached_property
    def added_text(self) -> list[tuple[Added, list[Signal]]]:
        """What the change adds to the model-visible text (`monitor.core.modeltext`), each text with
        the signals found in it (`monitor.core.poison`): read once for every content rule."""
        if self.new is None:
            return []
        return [(added, signals(added.text)) for added in added_texts(self.old, self.new)]

    @cached_property
    def added_kinds(self) -> frozenset[Kind]:
        """Every kind of signal `added_text` holds, for content rules to pass a change over at once."""
        return frozenset(signal.kind for _, found in self.added_text for signal in found)

    @property
    def both(self) -> tuple[Tool, Tool] | None:
        return (self.old, self.new) if self.old is not None and self.new is not None else None

    def label(self) -> str:
        return make_visible(self.name)
