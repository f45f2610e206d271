"""The canonical form and fingerprint of a tool listing (SPEC section 2).

Hosts and gateways compute the same fingerprint over the listing they cached, so this module
imports nothing but the standard library and can be vendored as it is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

META_KEY = "_meta"
SURROGATES = "surrogatepass"
"""JSON may carry lone surrogates (`"\\ud800"`) that strict UTF-8 cannot encode; valid text is unaffected."""


def without_meta(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The tool as it counts for identity: `_meta` is volatile, so it is stored but not compared."""
    if META_KEY not in tool:
        return tool
    return {key: value for key, value in tool.items() if key != META_KEY}


def canonical_tool(tool: Mapping[str, Any]) -> str:
    """One tool's canonical JSON: `_meta` removed, keys sorted, compact separators."""
    return json.dumps(without_meta(tool), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_form(tools: Iterable[Mapping[str, Any]]) -> bytes:
    """Exactly `json.dumps(sorted tools without _meta, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)` in UTF-8, built from each tool's canonical JSON (a compact JSON array
    is its elements joined by commas), so the per-tool forms double as content addresses."""
    return _join(canonical_tool(tool) for tool in sorted(tools, key=lambda tool: tool["name"]))


def fingerprint(tools: Iterable[Mapping[str, Any]]) -> str:
    """Lowercase hex SHA-256 of the canonical form of the tool objects exactly as the server sent them.

    Pass the wire JSON, not an SDK model dump: models drop unknown fields and add defaults.
    """
    return _sha256(canonical_form(tools))


@dataclass(frozen=True)
class CanonicalListing:
    """A listing indexed by tool name with each tool's canonical form and the listing fingerprint.

    Built once when a listing arrives; diffs and storage then compare and address tools by these
    forms without serialising anything again.
    """

    tools: dict[str, Mapping[str, Any]]
    forms: dict[str, str]
    fingerprint: str

    @classmethod
    def of(cls, tools: Iterable[Mapping[str, Any]]) -> CanonicalListing:
        by_name = {tool["name"]: tool for tool in tools}
        forms = {name: canonical_tool(tool) for name, tool in by_name.items()}
        ordered = (forms[name] for name in sorted(forms))
        return cls(tools=by_name, forms=forms, fingerprint=_sha256(_join(ordered)))

    def tool_fingerprint(self, name: str) -> str:
        return _sha256(self.forms[name].encode("utf-8", SURROGATES))


def tool_fingerprint(tool: Mapping[str, Any]) -> str:
    """SHA-256 of one tool's canonical JSON: the content address of a stored tool definition."""
    return _sha256(canonical_tool(tool).encode("utf-8", SURROGATES))


def _join(forms: Iterable[str]) -> bytes:
    return ("[" + ",".join(forms) + "]").encode("utf-8", SURROGATES)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
