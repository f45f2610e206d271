"""Config problems as one line each: the file, where in it (the section, the entry and its name, the
key) and what is wrong, never the value given (a value may be a secret)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

ENTRY_ARRAYS = frozenset({"servers", "webhooks"})
"""The arrays of tables (`[[servers]]`, `[[webhooks]]`), whose entries are named by their `name`."""
SECTIONS = ("monitor", "servers", "webhooks", "decisions", "aliases", "auth", "tracing")


class ConfigError(ValueError):
    """A config problem, with the file, the server and the field it concerns in the message."""


def explain(exc: ValidationError, data: Mapping[str, Any] | None = None, *, section: str = "") -> str:
    """`where: problem` for each error, joined by `; `.

    `where` reads like the file: `[monitor] poll_interval`, `servers[0] ('git'): command`,
    `webhooks[1] ('pager'): routing_key_env`. `data` is what was validated (to name the entries);
    `section` is the table a model of one section was validated from."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        location = _where(error["loc"], data or {}, section)
        problem = _problem(error, top_level=not section and len(error["loc"]) == 1)
        parts.append(f"{location}: {problem}" if location else problem)
    return "; ".join(parts)


def _problem(error: ErrorDetails, *, top_level: bool) -> str:
    if error["type"] == "extra_forbidden":
        return f"unknown section (the sections are {', '.join(SECTIONS)})" if top_level else "unknown key"
    return str(error["msg"]).removeprefix("Value error, ")


def _where(loc: Sequence[int | str], data: Mapping[str, Any], section: str) -> str:
    parts = [str(part) for part in loc]
    if section:
        return f"[{section}] " + ".".join(parts) if parts else f"[{section}]"
    if not parts:
        return ""
    head, rest = parts[0], list(loc[1:])
    if head in ENTRY_ARRAYS and rest and isinstance(rest[0], int):
        index, rest = rest[0], rest[1:]
        where = f"{head}[{index}]"
        entries = data.get(head)
        if isinstance(entries, list) and index < len(entries) and isinstance(entries[index], dict):
            name = entries[index].get("name")
            where += f" ({name!r})" if isinstance(name, str) else ""
        if head == "webhooks" and rest:
            rest = rest[1:]  # the sink's tag, which the entry's `format` already says
        return where + (": " + ".".join(str(part) for part in rest) if rest else "")
    if head in SECTIONS:
        return f"[{head}]" + (" " + ".".join(str(part) for part in rest) if rest else "")
    return ".".join(parts)
