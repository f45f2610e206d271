"""Untrusted text: finding characters a reader cannot see, showing them, and word diffs.

Tool descriptions are written by servers we do not trust and are read by models that see every
code point, so a character a person cannot see is a place to hide an instruction.
"""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from typing import Literal

_HIDDEN_CATEGORIES = frozenset({"Cf", "Cs"})
"""Format characters (zero-width, bidi controls, tags, soft hyphen, ...) and lone surrogates."""

_HIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0xE0000, 0xE007F),  # tag characters: invisible ASCII copies
    (0xFE00, 0xFE0F),  # variation selectors
    (0xE0100, 0xE01EF),  # variation selectors supplement
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul fillers
    (0x3164, 0x3164),
    (0xFFA0, 0xFFA0),
    (0x17B4, 0x17B5),  # Khmer inherent vowels, rendered as nothing
    (0x180B, 0x180F),  # Mongolian free variation selectors and vowel separator
)

_LAYOUT_CONTROLS = frozenset("\n\t\r")
"""Control characters ordinary text uses; every other one (escape, NUL, bell, ...) is hidden."""

WordOp = Literal["=", "-", "+"]


@functools.lru_cache(maxsize=1 << 16)
def is_hidden(char: str) -> bool:
    """True for characters that render as nothing or change the direction of what follows. Kept for
    each character once asked (text has few distinct ones): every hook answer's reason and every
    description on a page is checked, and a check costs the Python of the ranges below."""
    category = unicodedata.category(char)
    if category in _HIDDEN_CATEGORIES or (category == "Cc" and char not in _LAYOUT_CONTROLS):
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _HIDDEN_RANGES)


def hidden_characters(text: str) -> set[str]:
    if text.isascii() and _ASCII_HIDDEN.search(text) is None:
        return set()  # most text: one C-speed scan instead of a call per character
    return {char for char in set(text) if is_hidden(char)}


_ASCII_HIDDEN = re.compile(
    "[" + "".join(re.escape(chr(code)) for code in range(128) if is_hidden(chr(code))) + "]"
)
"""The ASCII characters `is_hidden` holds hidden (the controls but layout ones)."""


def codepoint_label(char: str) -> str:
    return f"<U+{ord(char):04X}>"


def _needs_label(char: str) -> bool:
    return char == "\r" or is_hidden(char)


def make_visible(text: str) -> str:
    """Replace every hidden character (and carriage returns) with a `<U+XXXX>` label.

    Safe for a terminal too: escape sequences start with a control character, which becomes a label.
    """
    labelled = {char for char in set(text) if _needs_label(char)}  # each distinct character once
    if not labelled:
        return text
    return "".join(codepoint_label(char) if char in labelled else char for char in text)


def describe_hidden(chars: set[str]) -> str:
    """`U+200B ZERO WIDTH SPACE, U+202E RIGHT-TO-LEFT OVERRIDE` in code point order."""
    parts = []
    for char in sorted(chars):
        name = unicodedata.name(char, "")
        parts.append(f"U+{ord(char):04X}" + (f" {name}" if name else ""))
    return ", ".join(parts)


_TAG_RUN = re.compile("[\U000e0020-\U000e007e]+")
"""Unicode tag characters that copy printable ASCII (U+E0020-U+E007E): text only a model reads."""


def smuggled_text(text: str, limit: int = 200) -> list[str]:
    """The ASCII each run of tag characters spells, as a model reads it; each cut to `limit` characters.

    The result is plain printable ASCII, to be escaped like any other server text wherever shown.
    """
    return [
        "".join(chr(ord(char) - 0xE0000) for char in run.group())[:limit] for run in _TAG_RUN.finditer(text)
    ]


_TOKEN = re.compile(r"\s+|\S+")

WORD_DIFF_BUDGET = 40_000
"""Most token pairs (old x new, after the common head and tail are set aside) the exact word diff
may weigh. `difflib` costs up to the product of the two lengths (and more on repetitive text), so
past this a hostile description would stall the writer for minutes: the changed middle is then
diffed by lines, and past the budget again shown as one removal and one addition."""


def word_diff(old: str, new: str) -> list[tuple[WordOp, str]]:
    """The change as runs of kept, removed and added text, cut at word boundaries.

    Bounded work whatever the input (see `WORD_DIFF_BUDGET`), and cached: pages and checkers that
    show the same change again do not redo it.
    """
    return list(_word_diff(old, new))


@functools.lru_cache(maxsize=64)
def _word_diff(old: str, new: str) -> tuple[tuple[WordOp, str], ...]:
    old_words = _TOKEN.findall(old)
    new_words = _TOKEN.findall(new)
    head = _common_head(old_words, new_words)
    tail = _common_head(old_words[head:][::-1], new_words[head:][::-1])
    old_middle = old_words[head : len(old_words) - tail]
    new_middle = new_words[head : len(new_words) - tail]
    ops: list[tuple[WordOp, str]] = []
    if head:
        ops.append(("=", "".join(old_words[:head])))
    if len(old_middle) * len(new_middle) <= WORD_DIFF_BUDGET:
        ops += _matched(old_middle, new_middle)
    else:
        old_lines = "".join(old_middle).splitlines(keepends=True)
        new_lines = "".join(new_middle).splitlines(keepends=True)
        if len(old_lines) * len(new_lines) <= WORD_DIFF_BUDGET:
            ops += _matched(old_lines, new_lines)
        else:  # one removal and one addition
            removed, added = "".join(old_middle), "".join(new_middle)
            ops += [("-", removed)] if removed else []
            ops += [("+", added)] if added else []
    if tail:
        ops.append(("=", "".join(old_words[len(old_words) - tail :])))
    return tuple(_merged(ops))


def _common_head(old: list[str], new: list[str]) -> int:
    count = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        count += 1
    return count


def _matched(old: list[str], new: list[str]) -> list[tuple[WordOp, str]]:
    ops: list[tuple[WordOp, str]] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            ops.append(("=", "".join(old[i1:i2])))
            continue
        if i2 > i1:
            ops.append(("-", "".join(old[i1:i2])))
        if j2 > j1:
            ops.append(("+", "".join(new[j1:j2])))
    return ops


def _merged(ops: list[tuple[WordOp, str]]) -> list[tuple[WordOp, str]]:
    """Adjacent runs of one kind joined (the head, middle and tail meet at kept text)."""
    merged: list[tuple[WordOp, str]] = []
    for op, text in ops:
        if merged and merged[-1][0] == op:
            merged[-1] = (op, merged[-1][1] + text)
        else:
            merged.append((op, text))
    return merged
