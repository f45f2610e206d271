"""The canonical form and fingerprint of a tool listing (docs/contract.md section 2, fingerprint v2).

The canonical form is RFC 8785 (the JSON Canonicalization Scheme): tools sorted by `name` in
UTF-16 code-unit order, each without `_meta`, serialised as JCS in UTF-8. Hosts and gateways
written in Go, Rust, TypeScript or Python reproduce it with a stock JCS library over the listing
they cached (docs/fingerprint.md), which `json.dumps(sort_keys=True)` never allowed (`1.0` against
`1`, `1e+16` against `10000000000000000`, astral-plane key order).

The serialisation is the `rfc8785` package's (with `json.dumps` standing in where it provably
writes the same text, which is most tool definitions, because it runs in C); this module adds only
what docs/contract.md section 2 says on top of it: numbers are read as IEEE-754 doubles the way `JSON.parse`
reads them, so an integer beyond 2^53 becomes the nearest double first. It depends on nothing
else of drift-monitor but `monitor.core.ijson` (which names where a value is not I-JSON), so the
two can be vendored with `rfc8785` beside them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import rfc8785

from monitor.core.ijson import ijson_problem

META_KEY = "_meta"
SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON parser reads exactly; beyond it a JSON number is the nearest double."""


class NotIJSONError(ValueError):
    """A value RFC 8785 cannot serialise (not I-JSON): a lone surrogate, NaN or Infinity, or a
    number beyond the double range. The message says where, as a JSON path such as
    `tools[2].inputSchema.properties.x.maximum`."""


class DuplicateToolNameError(ValueError):
    """A listing that names one tool twice has no fingerprint: hosts keep one of the copies, and not
    all the same one (a JavaScript host that maps tools by name keeps the last), so no single
    listing is what they hold. The CLI and the API refuse it the same way (docs/fingerprint.md)."""


def without_meta(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The tool as it counts for identity: `_meta` is volatile, so it is stored but not compared."""
    if META_KEY not in tool:
        return tool
    return {key: value for key, value in tool.items() if key != META_KEY}


def canonical_json(value: Any, where: str = "$") -> bytes:
    """RFC 8785 of any JSON value, numbers read as doubles; `NotIJSONError` names the offending spot."""
    return canonical_text(value, where).encode("utf-8")


def canonical_text(value: Any, where: str = "$") -> str:
    """`canonical_json` as text. Most tool definitions hold no fraction, exponent or huge integer and
    no character at or above U+D800; for those, `json.dumps` with sorted keys writes exactly the
    RFC 8785 text (same escapes, same integers, code-point key order equal to UTF-16 order), and
    runs in C. Anything else goes through `rfc8785`."""
    plain = _plain_json(value)
    return plain if plain is not None else _jcs(value, where).decode("utf-8")


_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_HIGH = re.compile("[\ud800-\U0010ffff]")
"""Characters whose UTF-16 order may differ from code-point order, and lone surrogates."""
_NOT_PLAIN = re.compile(r"\d[.eE]|\d{16}")
"""Outside strings: a fraction or exponent (written differently by ECMAScript), or an integer
that may lie beyond 2^53."""


def _plain_json(value: Any) -> str | None:
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return None
    if not text.isascii() and _HIGH.search(text):
        return None
    if _NOT_PLAIN.search(_STRINGS.sub("", text)):  # what is left of the text once strings are out
        return None
    return text


def _jcs(value: Any, where: str) -> bytes:
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        # Rare (an integer beyond 2^53): read every number as JSON.parse would, and try again.
        pass
    except (rfc8785.CanonicalizationError, UnicodeError) as exc:
        raise NotIJSONError(ijson_problem(value, where) or f"{where}: not I-JSON ({exc})") from None
    try:
        return rfc8785.dumps(as_doubles(value))
    except (rfc8785.CanonicalizationError, UnicodeError, OverflowError) as exc:
        raise NotIJSONError(ijson_problem(value, where) or f"{where}: not I-JSON ({exc})") from None


def as_doubles(value: Any) -> Any:
    """`value` with every integer beyond 2^53 replaced by the nearest double (OverflowError past
    the double range), as `JSON.parse` would have read it."""
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return float(value) if abs(value) > SAFE_INTEGER else value
    if isinstance(value, Mapping):
        return {key: as_doubles(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [as_doubles(child) for child in value]
    return value


def canonical_tool(tool: Mapping[str, Any], where: str = "tool") -> str:
    """One tool's canonical JSON: RFC 8785 of the tool without `_meta`."""
    return canonical_text(without_meta(tool), where)


def canonical_form(tools: Iterable[Mapping[str, Any]]) -> bytes:
    """The exact UTF-8 bytes that are hashed: RFC 8785 of the tools sorted by name in UTF-16
    code-unit order, each without `_meta`. A JCS array is its elements' JCS joined by commas, so
    it is built from the per-tool forms, which double as the tools' content addresses."""
    return CanonicalListing.of(tools).canonical


def fingerprint(tools: Iterable[Mapping[str, Any]]) -> str:
    """Lowercase hex SHA-256 of the canonical form of the tool objects exactly as the server sent them.

    Pass the wire JSON, not an SDK model dump: models drop unknown fields and add defaults.
    Raises `NotIJSONError` for a listing RFC 8785 cannot serialise and `DuplicateToolNameError`
    for one that names a tool twice.
    """
    return CanonicalListing.of(tools).fingerprint


def utf16_order(name: str) -> bytes:
    """The sort key of UTF-16 code-unit order (JavaScript's default string order)."""
    return name.encode("utf-16-be", "surrogatepass")


class CanonicalListing:
    """A listing indexed by tool name with each tool's canonical form and the listing fingerprint.

    Built once when a listing arrives; diffs and storage then compare and address tools by these
    forms without serialising anything again. A listing whose fingerprint is already known (the
    poller saw the very same JSON from the server last time, see `known`) computes its forms only
    if something reads them: an unchanged poll, the common case, never does.
    """

    __slots__ = ("_forms", "fingerprint", "tools")

    def __init__(
        self, tools: dict[str, Mapping[str, Any]], forms: dict[str, str] | None, fingerprint: str
    ) -> None:
        self.tools = tools
        self._forms = forms
        self.fingerprint = fingerprint

    @classmethod
    def of(cls, tools: Iterable[Mapping[str, Any]]) -> CanonicalListing:
        by_name: dict[str, Mapping[str, Any]] = {}
        forms: dict[str, str] = {}
        first: dict[str, int] = {}
        for index, tool in enumerate(tools):
            name = tool["name"]
            if name in first:
                raise DuplicateToolNameError(
                    f"tools[{index}]: duplicate tool name {name!r} (first at tools[{first[name]}])"
                )
            first[name] = index
            by_name[name] = tool
            forms[name] = canonical_tool(tool, f"tools[{index}]")
        return cls(by_name, forms, _sha256(_join(forms)))

    @classmethod
    def known(cls, tools: Iterable[Mapping[str, Any]], fingerprint: str) -> CanonicalListing:
        """The listing of `tools` (names unique, I-JSON: checked when `fingerprint` was computed for
        the same JSON), its forms computed only when read."""
        return cls({tool["name"]: tool for tool in tools}, None, fingerprint)

    @property
    def forms(self) -> dict[str, str]:
        if self._forms is None:
            self._forms = _forms_of(self.tools)
        return self._forms

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CanonicalListing):
            return NotImplemented
        return self.fingerprint == other.fingerprint and self.tools == other.tools

    def __repr__(self) -> str:
        return f"CanonicalListing({len(self.tools)} tools, fingerprint={self.fingerprint!r})"

    @property
    def canonical(self) -> bytes:
        return _join(self.forms)

    def tool_fingerprint(self, name: str) -> str:
        # JCS never holds a lone surrogate; a listing stored before v2 (on SQLite) may.
        return _sha256(self.forms[name].encode("utf-8", "surrogatepass"))


def tool_fingerprint(tool: Mapping[str, Any]) -> str:
    """SHA-256 of one tool's canonical JSON: the content address of a stored tool definition."""
    return _sha256(canonical_tool(tool).encode("utf-8"))


def _forms_of(by_name: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    return {
        name: canonical_tool(tool, f"tools[{index}]") for index, (name, tool) in enumerate(by_name.items())
    }


def _join(forms: Mapping[str, str]) -> bytes:
    ordered = (forms[name] for name in sorted(forms, key=utf16_order))
    return ("[" + ",".join(ordered) + "]").encode("utf-8")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
