"""Reading what a host's hook sends, whatever it sends: the few fields a decision needs, or why not.

A decision never depends on the tool's input (`tool_input`), which can be megabytes of file content
or nested deeper than any parser's recursion allows; only the top-level fields that name the tool
matter. So a body is parsed with orjson (a few times faster: every tool call is one) when it can
be, with `json.loads` when orjson refuses it (its messages, and what it accepts beyond orjson: a
lone surrogate escape, NaN, integers past 64 bits), and otherwise (nested too deeply for
it) scanned without recursion, keeping the top two levels and only checking the rest is JSON. Every
failure is a reason a person can read, which the adapters answer as a deny, never as an error status
that a host would ignore.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson

KEPT_DEPTH = 2
"""Levels of a deeply nested body that are kept (top-level fields and the objects they hold, such as
Gemini CLI's `mcp_context`); deeper values are checked and dropped."""

_TOKEN = re.compile(
    r"""[ \t\n\r]*(?:
        (?P<string>")
      | (?P<open>[{\[])
      | (?P<close>[}\]])
      | (?P<comma>,)
      | (?P<colon>:)
      | (?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
      | (?P<word>true|false|null)
    )""",
    re.VERBOSE,
)
_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None}
_scanstring = cast(Callable[[str, int], tuple[str, int]], json.decoder.scanstring)  # type: ignore[attr-defined]
"""The C scanner `json` reads strings with (not in the type stubs): fast on megabytes of escapes."""


def _string(text: str, position: int) -> tuple[str, int]:
    try:
        return _scanstring(text, position)
    except ValueError as exc:  # json.JSONDecodeError: unterminated, a bad escape, a control character
        raise Unreadable(f"the hook input is not JSON ({exc})") from None


class Unreadable(ValueError):
    """The body is not a JSON object a host would send; the message says why."""


def read_object(body: bytes) -> dict[str, Any]:
    """The JSON object `body` holds (deep values dropped when it is nested too deeply to parse)."""
    try:
        fast = orjson.loads(body)
    except orjson.JSONDecodeError:
        pass  # read again below, for the standard library's message or its wider reading
    else:
        if isinstance(fast, dict):
            return fast
        raise Unreadable("the hook input is not a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("the hook input is not UTF-8 text") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"the hook input is not JSON ({exc.msg} at character {exc.pos})") from None
    except RecursionError:
        value = _scan(text)
    if not isinstance(value, dict):
        raise Unreadable("the hook input is not a JSON object")
    return value


@dataclass
class _Open:
    """A container being scanned: its kept value (None below the kept depth), what comes next."""

    closer: str
    value: dict[str, Any] | list[Any] | None
    expect: str
    """`key` (or `}`), `colon`, `value`, `next` (`,` or the closer)."""
    key: str = ""
    empty: bool = True


def _scan(text: str) -> Any:
    """Parse `text` without recursion, keeping values down to `KEPT_DEPTH` levels."""
    stack: list[_Open] = []
    result: Any = _NOTHING
    position = 0
    while True:
        token = _TOKEN.match(text, position)
        if token is None:
            if text[position:].strip(" \t\n\r"):
                raise Unreadable(f"the hook input is not JSON (at character {position})")
            break
        kind, start, position = token.lastgroup, token.start(token.lastgroup or 0), token.end()
        top = stack[-1] if stack else None
        if top is not None and top.expect == "key":
            if kind == "string":
                top.key, position = _string(text, position)
                top.expect = "colon"
                continue
            if not (kind == "close" and top.empty and text[start] == top.closer):
                raise Unreadable(f"the hook input is not JSON (a key expected at character {start})")
        elif top is not None and top.expect == "colon":
            if kind != "colon":
                raise Unreadable(f"the hook input is not JSON (':' expected at character {start})")
            top.expect = "value"
            continue
        elif top is not None and top.expect == "next":
            if kind == "comma":
                top.expect = "key" if top.closer == "}" else "value"
                continue
            if kind != "close" or text[start] != top.closer:
                raise Unreadable(f"the hook input is not JSON (',' or {top.closer!r} expected at {start})")
        elif top is None and result is not _NOTHING:
            raise Unreadable(f"the hook input is not JSON (extra data at character {start})")
        value: Any
        if kind == "close":
            if top is None or text[start] != top.closer or not _may_close(top):
                raise Unreadable(f"the hook input is not JSON (unexpected {text[start]!r} at {start})")
            stack.pop()
            value = top.value
        elif kind == "open":
            kept = len(stack) < KEPT_DEPTH
            opened = _Open("}" if text[start] == "{" else "]", None, "key" if text[start] == "{" else "value")
            if kept:
                opened.value = {} if opened.closer == "}" else []
            stack.append(opened)
            continue
        elif kind == "string":
            value, position = _string(text, position)
        elif kind == "number":
            number = token["number"]
            value = float(number) if any(c in number for c in ".eE") else int(number)
        elif kind == "word":
            value = _WORDS[token["word"]]
        else:
            raise Unreadable(f"the hook input is not JSON (unexpected {text[start]!r} at character {start})")
        if not stack:
            result = value
            continue
        parent = stack[-1]
        if isinstance(parent.value, dict):
            parent.value[parent.key] = value
        elif isinstance(parent.value, list):
            parent.value.append(value)
        parent.expect, parent.empty = "next", False
    if stack or result is _NOTHING:
        raise Unreadable("the hook input is not JSON (it ends early)")
    return result


def _may_close(container: _Open) -> bool:
    """After a value, or at once for `{}` and `[]`."""
    if container.expect == "next":
        return True
    first = "key" if container.closer == "}" else "value"
    return container.empty and container.expect == first


_NOTHING = object()
