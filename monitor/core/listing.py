"""The listing model: reading `tools/list` payloads and the effective annotations of a tool.

A listing is kept as the plain JSON the server sent; this module only checks the little that
identity needs (objects with unique string names) and reads annotations the way hosts do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor.core.ijson import ijson_problem

Tool = dict[str, Any]

HINT_DEFAULTS: dict[str, bool] = {
    "readOnlyHint": False,
    "destructiveHint": True,
    "idempotentHint": False,
    "openWorldHint": True,
}
"""The specification's defaults for absent hints: deliberately pessimistic."""

WRITE_ONLY_HINTS = ("destructiveHint", "idempotentHint")
"""Hints that mean something only when the tool is not read-only."""


class ListingError(ValueError):
    """A payload that is not a usable tool listing; the message says where."""


def parse_listing(data: Any) -> list[Tool]:
    """Tools from a `tools/list` result, a JSON-RPC response wrapping one, or a bare array."""
    if isinstance(data, Mapping) and "jsonrpc" in data:
        if "error" in data:
            error = data["error"]
            if isinstance(error, Mapping):
                raise ListingError(
                    f"JSON-RPC error response (code {error.get('code')!r}): {error.get('message')!r}"
                )
            raise ListingError("JSON-RPC error response")
        if "result" not in data:
            raise ListingError("JSON-RPC message has neither 'result' nor 'error'")
        data = data["result"]
    if isinstance(data, Mapping):
        if "tools" not in data:
            raise ListingError("object has no 'tools' key (expected a tools/list result)")
        data = data["tools"]
    if not isinstance(data, list):
        raise ListingError(f"expected a list of tools, got {_json_type(data)}")
    return validate_tools(data)


def validate_tools(tools: list[Any]) -> list[Tool]:
    """Check that every tool is an object with a unique string name and the listing is I-JSON (no NaN,
    infinity, out-of-range number or lone surrogate: docs/contract.md section 2); the tools come back
    unchanged."""
    problem = ijson_problem(tools, "tools")
    if problem is not None:
        raise ListingError(f"not I-JSON: {problem}")
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise ListingError(f"{where}: expected an object, got {_json_type(tool)}")
        name = tool.get("name")
        if not isinstance(name, str):
            raise ListingError(f"{where}: tool has no string 'name'")
        if name in seen:
            raise ListingError(f"{where}: duplicate tool name {name!r} (first at tools[{seen[name]}])")
        seen[name] = index
    return tools


def load_listing(path: str | Path) -> list[Tool]:
    """Read and parse a listing file; every failure is a ListingError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ListingError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    return read_listing(text, str(path))


def read_listing(text: str, path: str) -> list[Tool]:
    """Parse a listing's JSON text; every failure is a ListingError naming `path` (a file, or <stdin>)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ListingError(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RecursionError as exc:
        raise ListingError(f"{path}: JSON nested too deeply") from exc
    try:
        return parse_listing(data)
    except ListingError as exc:
        raise ListingError(f"{path}: {exc}") from exc


def offers_tools(capabilities: Mapping[str, Any] | None) -> bool:
    """Whether a server's declared capabilities include `tools` (an object; null is absent, as the
    MCP Python SDK reads it). A server without it offers no tools: the MCP lifecycle has clients
    use only what was negotiated, and hosts on the TypeScript SDK refuse to ask it for any."""
    return isinstance(capabilities, Mapping) and isinstance(capabilities.get("tools"), Mapping)


def annotations_of(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The tool's annotations object, or None when it has none (or something that is not an object)."""
    annotations = tool.get("annotations")
    return annotations if isinstance(annotations, Mapping) else None


@dataclass(frozen=True)
class EffectiveHints:
    """Hint values as hosts read them: what the MCP Python SDK reads (`sdk_boolean`), the defaults
    for anything else."""

    # The wire names, so rules, findings and docs speak one vocabulary.
    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool
    declared: frozenset[str]
    """Hints with a value a host reads (a JSON boolean, or a value the Python SDK coerces to one)."""
    not_boolean: frozenset[str] = frozenset()
    """Hints present with a value that is not a JSON boolean (`"true"`, `1`, `null`, `"maybe"`)."""

    def get(self, hint: str) -> bool:
        return bool(getattr(self, hint))

    def applies(self, hint: str) -> bool:
        """False for destructive/idempotent hints of a read-only tool, which hosts ignore."""
        return not (self.readOnlyHint and hint in WRITE_ONLY_HINTS)

    @property
    def writes_destructively(self) -> bool:
        return not self.readOnlyHint and self.destructiveHint


SDK_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
SDK_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
"""The strings pydantic's lax `bool` reads, compared lower-cased (docs/clients.md, "Values hosts read
differently"): the MCP Python SDK validates `ToolAnnotations` with it, so `"true"`, `"YES"` or `"1"`
is a read-only tool to a host built on that SDK."""


def sdk_boolean(raw: Any) -> bool | None:
    """A hint value as the MCP Python SDK reads it (pydantic lax mode): a JSON boolean; 0 or 1 (also
    written 0.0 and 1.0); one of `SDK_TRUE` / `SDK_FALSE` in any case. None for null and anything
    else: that SDK reads null as absent and refuses the whole listing over any other value, as the
    TypeScript SDK (zod `z.boolean()`) refuses every value but a JSON boolean."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float):
        return bool(raw) if raw in (0, 1) else None
    if isinstance(raw, str):
        lowered = raw.lower()
        if lowered in SDK_TRUE:
            return True
        if lowered in SDK_FALSE:
            return False
    return None


def effective_hints(tool: Mapping[str, Any]) -> EffectiveHints:
    """Declared values as the Python SDK coerces them (a string `"true"` is read-only to its hosts);
    the specification's defaults for absent and unreadable ones."""
    annotations = annotations_of(tool) or {}
    values: dict[str, bool] = {}
    declared: set[str] = set()
    not_boolean: set[str] = set()
    for hint, default in HINT_DEFAULTS.items():
        raw = annotations.get(hint)
        if hint in annotations and not isinstance(raw, bool):
            not_boolean.add(hint)
        read = sdk_boolean(raw)
        if read is None:
            values[hint] = default
        else:
            values[hint] = read
            declared.add(hint)
    return EffectiveHints(**values, declared=frozenset(declared), not_boolean=frozenset(not_boolean))


Hints = dict[str, bool]
"""The four hints' effective values, by wire name."""

STRICT_IF_ALL = ("readOnlyHint", "idempotentHint")
"""Claims that hold, read strictly, only when every reading makes them; destructive and open-world
hold when any one does."""


def hints_of(tool: Mapping[str, Any]) -> Hints:
    """The effective values of the four hints (defaults for absent ones), as hosts read them."""
    effective = effective_hints(tool)
    return {hint: effective.get(hint) for hint in HINT_DEFAULTS}


def strictest_hints(readings: Sequence[Hints]) -> Hints:
    """The strictest reading of several per field: read-only and idempotent only if every reading
    says so, destructive and open-world if any does."""
    return {
        hint: all(r[hint] for r in readings) if hint in STRICT_IF_ALL else any(r[hint] for r in readings)
        for hint in HINT_DEFAULTS
    }


def duplicated_tools(tools: Sequence[Any]) -> dict[str, list[Tool]]:
    """Every tool name listed more than once, with its copies in order (hosts keep different ones:
    a JavaScript host that maps tools by name keeps the last)."""
    copies: dict[str, list[Tool]] = {}
    for tool in tools:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            copies.setdefault(tool["name"], []).append(tool)
    return {name: found for name, found in copies.items() if len(found) > 1}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
