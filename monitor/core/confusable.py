"""Names a reader cannot tell apart: the Unicode TR39 skeleton, plus case, invisible and space characters.

A tool removed and another added under a name that looks the same (`read_file` and `reаd_file`
with a Cyrillic `а`, `read_file` with a zero-width space or a trailing space, `Read_File`) reads to
a person approving it, and to a model choosing it, as the same tool. TR39 (Unicode Security
Mechanisms, section 4) calls two strings confusable when their skeletons are equal: each
character mapped to its prototype in the Unicode confusables data. The data is the
`confusable-homoglyphs` package's copy of `confusables.txt`; on top of TR39, characters that
render as nothing and whitespace are dropped, and case is folded in a second comparison (TR39 keeps
case: `I` and `l` are confusable, `I` and `i` are not, and both readings matter for a name).
"""

from __future__ import annotations

import functools
import unicodedata

from confusable_homoglyphs import utils as homoglyph_data

from monitor.core.text import is_hidden

_DIRECTION_MARK = "\u200e"
"""The data file wraps right-to-left characters in LEFT-TO-RIGHT MARKs for display: not part of them."""


@functools.cache
def _prototypes() -> dict[str, str]:
    """Each confusable character's prototype string.

    The package stores `confusables.txt` both ways (a source lists its prototype, a prototype its
    sources). A source is one code point with exactly one entry: its prototype (TR39 prototypes are
    never sources). When two single characters list only each other, which one is the prototype
    cannot be told, and either serves: both map to the smaller, so their skeletons agree.
    """
    data = homoglyph_data.load("confusables.json")
    listed = {
        key.replace(_DIRECTION_MARK, ""): [entry["c"].replace(_DIRECTION_MARK, "") for entry in entries]
        for key, entries in data.items()
    }
    prototypes: dict[str, str] = {}
    for char, entries in listed.items():
        if len(char) != 1 or len(entries) != 1 or entries[0] == char:
            continue
        target = entries[0]
        back = listed.get(target, [])
        if len(target) == 1 and back == [char]:
            target = min(char, target)
            if target == char:
                continue
        prototypes[char] = target
    return prototypes


def _ignored(char: str) -> bool:
    """Characters that show as nothing or as blank space: invisible in a name."""
    return is_hidden(char) or char.isspace() or unicodedata.category(char) in ("Zs", "Zl", "Zp")


def skeleton(text: str) -> str:
    """TR39's skeleton of `text` without its invisible and space characters: NFD, each character to
    its prototype, NFD again."""
    prototypes = _prototypes()
    decomposed = unicodedata.normalize("NFD", text)
    mapped = "".join(prototypes.get(char, char) for char in decomposed if not _ignored(char))
    return unicodedata.normalize("NFD", mapped)


def confusable(first: str, second: str) -> bool:
    """Whether two different names look alike: equal skeletons, as written or with case folded."""
    if first == second:
        return False
    if skeleton(first) == skeleton(second):
        return True
    return skeleton(first.casefold()) == skeleton(second.casefold())


def escaped(name: str) -> str:
    """`name` with every character outside printable ASCII (and every space) as `<U+XXXX>`, so two
    look-alike names read differently wherever they are shown."""
    return "".join(
        char if char.isascii() and char.isprintable() and char != " " else f"<U+{ord(char):04X}>"
        for char in name
    )


def differing_characters(first: str, second: str) -> list[str]:
    """The characters of either name that are not plain printable ASCII, named: `U+0430 CYRILLIC
    SMALL LETTER A`, in the order they appear (each once)."""
    seen: dict[str, None] = {}
    for char in first + second:
        if not (char.isascii() and char.isprintable() and char != " "):
            seen.setdefault(char)
    return [f"U+{ord(char):04X} {unicodedata.name(char, '(unnamed)')}" for char in seen]
