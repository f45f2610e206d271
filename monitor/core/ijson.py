"""I-JSON (RFC 7493): what RFC 8785 can canonicalise and every database and JSON parser accepts.

Python's `json` reads `NaN`, `Infinity` and `1e400` (as infinity) and lone surrogates
(`"\\ud800"`) without complaint, but none of them can be fingerprinted (docs/contract.md section 2),
PostgreSQL's jsonb refuses them, and receivers' JSON parsers reject them. A listing that carries one
is recorded as a `malformed` poll that says where, never stored as a version and never passed on.
"""

from __future__ import annotations

import math
import sys
from typing import Any

_MAX_DOUBLE = sys.float_info.max


def ijson_problem(value: Any, where: str = "listing") -> str | None:
    """Where and why `value` (parsed JSON) is not I-JSON, or None when it is.

    Iterative, so a deeply nested listing costs a list, not the interpreter's stack.
    """
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return f"{path}: a string holds a lone surrogate (not valid Unicode text)"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{path}: {_number(item)} is not a JSON number (NaN, infinite or out of range)"
        elif isinstance(item, int):
            if abs(item) > _MAX_DOUBLE:
                return f"{path}: an integer of {len(str(abs(item)))} digits is beyond the double range"
        elif isinstance(item, dict):
            for key, inner in item.items():
                if isinstance(key, str) and _has_surrogate(key):
                    return f"{path}: an object key holds a lone surrogate (not valid Unicode text)"
                stack.append((inner, f"{path}.{_label(key)}"))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{path}[{index}]") for index, inner in enumerate(item))
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _number(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _label(key: Any) -> str:
    text = str(key)
    if len(text) > 40:
        text = text[:40] + "…"
    return text.encode("ascii", "backslashreplace").decode("ascii")


def json_safe(value: Any) -> Any:
    """`value` with every non-finite number (NaN, infinities) as its name in a string, so it can be
    sent as strict JSON: what a database filled before listings were checked may still hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return _number(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def unicode_text(value: str) -> bool:
    """Valid Unicode (no lone surrogates): what the columns holding tool names can bind, NUL included."""
    return not _has_surrogate(value)


def storable(value: str) -> bool:
    """Free text both databases can bind as a plain column: no NUL (PostgreSQL refuses it) and no lone
    surrogates. The one check of names, notes and ids that people and hosts send."""
    return "\x00" not in value and not _has_surrogate(value)
