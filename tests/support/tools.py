"""Tool definitions as MCP servers list them, built in one place: `tool` makes one; `numbered_tools`
a listing of many alike, `read_only_flip` the listing a test of annotation drift records before and
after, and `versioned_listing` a small listing in as many versions as a test needs."""

from __future__ import annotations

from types import EllipsisType
from typing import Any


def tool(
    name: str,
    *,
    description: str | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    input_schema: dict[str, Any] | EllipsisType | None = ...,
    annotations: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One tool of a `tools/list` result: `tool("lookup", read_only=True, description="Look it up.")`.

    `input_schema` defaults to an empty object schema (None leaves it out, as servers that break the
    spec do); `read_only` and `destructive` become the `readOnlyHint` and `destructiveHint`
    annotations (next to any other `annotations` given); any other field (title, outputSchema,
    _meta, vendor keys) is passed through as is.
    """
    definition: dict[str, Any] = {"name": name}
    if description is not None:
        definition["description"] = description
    if input_schema is ...:
        definition["inputSchema"] = {"type": "object"}
    elif input_schema is not None:
        definition["inputSchema"] = input_schema
    hints = dict(annotations or {})
    if read_only is not None:
        hints["readOnlyHint"] = read_only
    if destructive is not None:
        hints["destructiveHint"] = destructive
    if hints or annotations is not None:
        definition["annotations"] = hints
    definition.update(fields)
    return definition


def numbered_tools(count: int, name: str = "tool_{}", **fields: Any) -> list[dict[str, Any]]:
    """`count` tools alike but for their names, `name` formatted with 0, 1, ...: `numbered_tools(3,
    "t{}", read_only=True)`; `fields` are `tool`'s."""
    return [tool(name.format(number), **fields) for number in range(count)]


def read_only_flip(
    read_only: bool, name: str = "purge_tenant", *, others: list[dict[str, Any]] | None = None, **fields: Any
) -> list[dict[str, Any]]:
    """The listing of a test of annotation drift: the tool `name`, read-only or not (`fields` are the
    rest of it, as `tool` takes them), then `others` (default: a read-only `lookup`)."""
    return [
        tool(name, read_only=read_only, **fields),
        *(others if others is not None else [tool("lookup", read_only=True)]),
    ]


def versioned_listing(version: int = 1, *, read_only: bool = True) -> list[dict[str, Any]]:
    """A listing whose `search` names its `version` in its description (each number a version of its
    own) and is read-only or not, beside a destructive `delete`."""
    others = [tool("delete", description="Delete.", destructive=True)]
    return read_only_flip(read_only, "search", description=f"Search v{version}.", others=others)
