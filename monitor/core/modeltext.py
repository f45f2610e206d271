"""Model-visible text: every string of a tool definition a model reads, where it sits, and what a
change adds to it.

Hosts hand a model the whole tool: its name, title, `annotations.title`, description, and both
schemas as JSON, so every string the schemas carry reaches the model too: property names,
descriptions, titles, `enum` and `const` values, defaults and examples, at any depth. A server's
`instructions` go into the model's context as well. Content rules (`monitor.core.rules.poisoning`)
judge these texts; a change is judged on what it adds, so a long description that was always there
does not raise again when a typo in it is fixed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from monitor.core.listing import Tool, annotations_of
from monitor.core.text import word_diff

SCHEMAS = ("inputSchema", "outputSchema")
NOT_READ_AS_TEXT = frozenset({"type", "$schema", "$ref", "$id", "format", "required"})
"""Schema keys whose strings are structure, not words: a type name, a reference, a format name, the
required properties (each property's name is judged where it is defined)."""
NAMED_MEMBERS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""Schema keys whose members' names are text a model reads (a property named `content_of_ssh_key`)."""
MAX_TEXTS = 100_000
"""Most texts read from one definition: a hostile schema cannot make the walk unbounded."""


@dataclass(frozen=True)
class Span:
    start: int
    end: int


@dataclass(frozen=True)
class Added:
    """One model-visible text, where it sits, and the parts of it a change added (all of it when new)."""

    where: str
    """Where in the definition: `description`, `inputSchema.properties.path.description`,
    `inputSchema.properties.mode.enum[2]`, `inputSchema.properties.sidenote` (a property's name)."""
    text: str
    spans: tuple[Span, ...]

    def adds(self, start: int, end: int) -> bool:
        """Whether the text from `start` to `end` overlaps what the change added."""
        return any(span.start < end and start < span.end for span in self.spans)


def texts_of(tool: Tool) -> dict[str, str]:
    """Every model-visible text of a tool by where it sits, in reading order."""
    found: dict[str, str] = {}
    name = tool.get("name")
    if isinstance(name, str):
        found["name"] = name
    for key in ("title", "description"):
        if isinstance(tool.get(key), str):
            found[key] = tool[key]
    title = (annotations_of(tool) or {}).get("title")
    if isinstance(title, str):
        found["annotations.title"] = title
    for schema in SCHEMAS:
        if schema in tool:
            for where, text in _schema_texts(tool[schema], schema):
                if len(found) >= MAX_TEXTS:
                    return found
                found[where] = text
    return found


def _schema_texts(schema: Any, root: str) -> Iterator[tuple[str, str]]:
    """The strings of a schema and the names of its members, depth first, without recursion."""
    stack: list[tuple[str, Any]] = [(root, schema)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, list):
            stack.extend((f"{where}[{index}]", item) for index, item in reversed(list(enumerate(value))))
        elif isinstance(value, Mapping):
            members = []
            for key, item in value.items():
                if key in NOT_READ_AS_TEXT:
                    continue
                if key in NAMED_MEMBERS and isinstance(item, Mapping):
                    for name, member in item.items():
                        yield f"{where}.{key}.{name}", str(name)
                        members.append((f"{where}.{key}.{name}", member))
                else:
                    members.append((f"{where}.{key}", item))
            stack.extend(reversed(members))


def added_texts(old: Tool | None, new: Tool) -> list[Added]:
    """What a change from `old` to `new` adds to the model-visible text: each text at a place `old`
    did not have, whole; each text that changed, with the word diff's insertions as its spans."""
    before = texts_of(old) if old is not None else {}
    return added_between(before, texts_of(new))


def added_between(before: Mapping[str, str], after: Mapping[str, str]) -> list[Added]:
    """`added_texts` over texts already read (a server's instructions: `{"instructions": text}`)."""
    found = []
    for where, text in after.items():
        previous = before.get(where)
        if previous == text or not text:
            continue
        if previous is None:
            found.append(Added(where, text, (Span(0, len(text)),)))
            continue
        spans = list(_insertions(previous, text))
        if spans:
            found.append(Added(where, text, tuple(spans)))
    return found


def first_sight(tool: Tool) -> list[Added]:
    """Every model-visible text of a tool seen for the first time, whole."""
    return added_texts(None, tool)


def _insertions(old: str, new: str) -> Iterator[Span]:
    at = 0
    for op, text in word_diff(old, new):
        if op == "=":
            at += len(text)
        elif op == "+":
            yield Span(at, at + len(text))
            at += len(text)
