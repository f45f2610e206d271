"""The rule on a tool's `_meta`: `meta-changed`.

`_meta` is outside the fingerprint (docs/contract.md section 2): servers put request ids and
timestamps there, so a change of it is no new version. It is kept per server and per version, and
a change of it is recorded, as information; but hosts render some keys (an MCP Apps `_meta.ui`
names the UI resource a host shows for the tool), and a change there changes what people see
without a new version, so it is high.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.fingerprint import META_KEY
from monitor.core.rules.catalog import Rule, rule
from monitor.core.text import make_visible

RENDERED_KEYS = ("ui", "ui/resourceUri")
"""`_meta` keys hosts render: MCP Apps' `ui` (`resourceUri`, `visibility`) and its earlier form."""
RENDERED_PREFIXES = ("openai/",)
"""Prefixes of `_meta` keys hosts render: the OpenAI Apps SDK's (`openai/outputTemplate`, ...)."""


@rule(
    "meta-changed",
    Severity.INFO,
    "A tool's `_meta` changed (kept per server and version, outside the fingerprint); high when a key "
    "hosts render changed: `ui` or `ui/resourceUri` (MCP Apps), `openai/...` (OpenAI Apps SDK).",
    scope="server",
)
def meta_changes(
    rule: Rule, server: str, old: Mapping[str, Any], new: Mapping[str, Any], tools: Iterable[str]
) -> list[Finding]:
    """One finding per tool of `tools` whose `_meta` is not what it was (`old`, `new`: tool name ->
    `_meta`, a tool without one absent)."""
    found = []
    for name in sorted(tools):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        keys = _changed_keys(before, after)
        rendered = [key for key in keys if key in RENDERED_KEYS or key.startswith(RENDERED_PREFIXES)]
        label = make_visible(name)
        shown = ", ".join(make_visible(key) for key in keys[:10]) + (", ..." if len(keys) > 10 else "")
        if rendered:
            key = rendered[0]
            found.append(
                rule.finding(
                    ToolChange(name, None, None),
                    f"_meta.{key}",
                    _get(before, key),
                    _get(after, key),
                    f"{server}: the _meta of {label} changed where hosts render it "
                    f"({', '.join(make_visible(k) for k in rendered)}): what they show for the tool "
                    "changed without a new version.",
                    detail={"keys": keys},
                    severity=Severity.HIGH,
                )
            )
            continue
        found.append(
            rule.finding(
                ToolChange(name, None, None),
                "_meta",
                before,
                after,
                f"{server}: the _meta of {label} changed ({shown or 'its value'}).",
                detail={"keys": keys},
            )
        )
    return found


def metas_of(tools: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Tool name -> `_meta`, for the tools of a listing that send one (what a version keeps)."""
    return {tool["name"]: tool[META_KEY] for tool in tools if META_KEY in tool}


def metas_digest(metas: Mapping[str, Any]) -> str:
    """SHA-256 of the tools' `_meta` (tool name -> `_meta`) as sorted-key ASCII JSON: equal digests,
    equal `_meta` (whatever order the server wrote the keys in)."""
    if not metas:  # most listings: no tool has a _meta
        return _NO_METAS
    return _digest(metas)


def _digest(metas: Mapping[str, Any]) -> str:
    text = json.dumps(metas, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


_NO_METAS = _digest({})


def _changed_keys(before: Any, after: Any) -> list[str]:
    """The top-level keys whose values differ; [] when either side is no object."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        one = before if isinstance(before, Mapping) else after
        return sorted(str(key) for key in one) if isinstance(one, Mapping) else []
    return sorted(str(key) for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def _get(meta: Any, key: str) -> Any:
    return meta.get(key) if isinstance(meta, Mapping) else None
