"""Tool definitions as MCP servers list them, built in one place."""

from __future__ import annotations

from typing import Any


def tool(
    name: str,
    *,
    description: str | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    input_schema: dict[str, Any] | None = None,
    annotations: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """One tool of a `tools/list` result: `tool("lookup", read_only=True, description="Look it up.")`.

    `input_schema` defaults to an empty object schema; `read_only` and `destructive` become the
    `readOnlyHint` and `destructiveHint` annotations (next to any other `annotations` given); any
    other field (title, outputSchema, _meta, vendor keys) is passed through as is.
    """
    definition: dict[str, Any] = {"name": name}
    if description is not None:
        definition["description"] = description
    definition["inputSchema"] = input_schema if input_schema is not None else {"type": "object"}
    hints = dict(annotations or {})
    if read_only is not None:
        hints["readOnlyHint"] = read_only
    if destructive is not None:
        hints["destructiveHint"] = destructive
    if hints or annotations is not None:
        definition["annotations"] = hints
    definition.update(fields)
    return definition
