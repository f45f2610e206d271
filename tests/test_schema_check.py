"""The poller's check of a `tools/list` page (monitor/collect/client/schema.py) is the SDK's, less the
dump nobody reads: the same listings accepted, the same errors for the rest, at every known version,
on listings parsed as the transports parse them; and a session checks its pages with it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import methods
from pydantic import ValidationError
from support import http_server, raw_fleet, tool

from monitor.collect.client import Limits, Target, fetch_listing, schema

VERSIONS = list(schema.LISTING_MODELS)
MODERN = "2026-07-28"
CACHE_HINTS = {"resultType": "complete", "ttlMs": 60_000, "cacheScope": "public"}
"""What a 2026-07-28 `tools/list` result must carry besides its tools."""


def outcome(check: Callable[..., None], version: str, text: str) -> str:
    """What `check` makes of the result `text` holds, parsed as the transports parse an answer: the
    error it raises (every field of every error, in order), or "accepted"."""
    data = pydantic_core.from_json(text)
    try:
        check("tools/list", version, data)
    except ValidationError as error:
        return f"{error.title} {error.errors()!r}"
    except Exception as error:  # any other failure must be the SDK's as well
        return f"{type(error).__name__}: {error}"
    return "accepted"


def same_outcome(version: str, result: Any) -> str:
    """The SDK's verdict on `result` at `version`, once ours is found to be the same."""
    text = json.dumps(result)
    sdk = outcome(schema.sdk_validate_server_result, version, text)
    assert outcome(schema.validate_server_result, version, text) == sdk
    return sdk


def at(version: str, result: dict[str, Any]) -> dict[str, Any]:
    """`result` as a server speaking `version` sends it (2026-07-28 adds its cache hints)."""
    return {**CACHE_HINTS, **result} if version == MODERN else result


SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
GOOD = tool("read_file", description="Read a file.", input_schema=SCHEMA, read_only=True)

VALID = {
    "one tool": {"tools": [GOOD]},
    "no tools": {"tools": []},
    "every optional field": {
        "tools": [
            {
                **GOOD,
                "title": "Read a file",
                "outputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "annotations": {
                    "title": "Read",
                    "readOnlyHint": True,
                    "destructiveHint": False,
                    "idempotentHint": True,
                    "openWorldHint": False,
                },
                "icons": [{"src": "data:,", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"}],
                "execution": {"taskSupport": "optional"},
                "_meta": {"com.example/revision": 7},
            }
        ]
    },
    "extra fields everywhere": {
        "tools": [
            {
                **GOOD,
                "x-vendor": {"team": "storage", "weights": [1, 2.5, None]},
                "annotations": {"readOnlyHint": True, "futureHint": {"nested": None}, "x-audience": "all"},
                "inputSchema": {**SCHEMA, "additionalProperties": False, "$defs": {"a": {"type": "string"}}},
            }
        ],
        "x-page": 3,
    },
    "nulls for optional fields": {
        "tools": [
            {
                **GOOD,
                "title": None,
                "description": None,
                "annotations": None,
                "outputSchema": None,
                "icons": None,
                "execution": None,
                "_meta": None,
            }
        ],
        "nextCursor": None,
        "_meta": None,
    },
    "null annotation hints": {"tools": [tool("t", annotations={"readOnlyHint": None, "title": None})]},
    "a page with a cursor": {"tools": [GOOD], "nextCursor": "cGFnZTI="},
    "an empty cursor": {"tools": [GOOD], "nextCursor": ""},
    "result _meta": {"tools": [GOOD], "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}}},
    "unicode": {
        "tools": [
            tool(
                "读取文件",
                description="«ünïcode» ✓ \u200b\u202e 😀 \u0000",
                title="\U0001f4c1 Dateien",
                input_schema={"type": "object", "properties": {"пўть": {"description": "ℵ"}}},
            ),
        ]
    },
    "JSON numbers of every kind in free-form places": {
        "tools": [
            tool(
                "n", input_schema={"type": "object", "x": [0, -0.0, 1e308, 2**70, 1.5]}, _meta={"big": 2**100}
            )
        ]
    },
    "words and numbers pydantic reads as booleans": {
        "tools": [
            tool("t", annotations={"readOnlyHint": "yes", "destructiveHint": 0, "openWorldHint": "off"}),
            tool("u", input_schema={"type": "object", "properties": {"a": 1, "b": "true"}}),
        ]
    },
    "boolean property schemas": {
        "tools": [tool("b", input_schema={"type": "object", "properties": {"a": True, "b": False}})]
    },
    "many tools": {"tools": [tool(f"tool_{n}", input_schema=SCHEMA) for n in range(200)]},
}

INVALID = {
    "no tools key": {},
    "tools null": {"tools": None},
    "tools an object": {"tools": {"name": "t"}},
    "a tool that is a string": {"tools": ["read_file"]},
    "a tool that is null": {"tools": [GOOD, None]},
    "no name": {"tools": [{"inputSchema": {"type": "object"}}]},
    "name null": {"tools": [{**GOOD, "name": None}]},
    "name a number": {"tools": [{**GOOD, "name": 7}]},
    "no inputSchema": {"tools": [tool("t", input_schema=None)]},
    "inputSchema null": {"tools": [{**GOOD, "inputSchema": None}]},
    "inputSchema without type": {"tools": [tool("read_file", input_schema={"properties": {"path": {}}})]},
    "inputSchema of type array": {"tools": [tool("t", input_schema={"type": "array"})]},
    "inputSchema type null": {"tools": [tool("t", input_schema={"type": None})]},
    "inputSchema a list": {"tools": [tool("t", input_schema=[{"type": "object"}])]},
    "inputSchema $schema a number": {"tools": [tool("t", input_schema={"type": "object", "$schema": 7})]},
    "description a list": {"tools": [{**GOOD, "description": ["a", "b"]}]},
    "title a number": {"tools": [{**GOOD, "title": 1}]},
    "annotations a list": {"tools": [{**GOOD, "annotations": [{"readOnlyHint": True}]}]},
    "annotations a string": {"tools": [{**GOOD, "annotations": "read-only"}]},
    "hint a word": {"tools": [tool("t", annotations={"readOnlyHint": "maybe"})]},
    "hint a number": {"tools": [tool("t", annotations={"destructiveHint": 2})]},
    "hints of every wrong type": {
        "tools": [
            tool(
                "t",
                annotations={
                    "readOnlyHint": [],
                    "destructiveHint": {},
                    "idempotentHint": "no",
                    "openWorldHint": 1.5,
                    "title": False,
                },
            )
        ]
    },
    "icon without src": {"tools": [{**GOOD, "icons": [{"mimeType": "image/png"}]}]},
    "icon theme unknown": {"tools": [{**GOOD, "icons": [{"src": "data:,", "theme": "sepia"}]}]},
    "icons an object": {"tools": [{**GOOD, "icons": {"src": "data:,"}}]},
    "_meta a list": {"tools": [{**GOOD, "_meta": ["a"]}]},
    "_meta a string": {"tools": [GOOD], "_meta": "meta"},
    "cursor a number": {"tools": [GOOD], "nextCursor": 2},
    "cursor an object": {"tools": [GOOD], "nextCursor": {"page": 2}},
    "errors on many tools": {"tools": [tool(f"t{n}", input_schema={"type": n}) for n in range(60)]},
    "every tool broken differently": {
        "tools": [
            {"name": None},
            {**GOOD, "inputSchema": "object"},
            {**GOOD, "annotations": {"readOnlyHint": "true"}},
            7,
            {**GOOD, "title": {}, "description": 0, "icons": [None]},
        ],
        "nextCursor": False,
    },
}
"""Broken at every version (2026-07-28 as much as the handshake era's)."""

BY_ERA = {
    "property schema a number": {
        "tools": [tool("p", input_schema={"type": "object", "properties": {"a": 7}})]
    },
    "properties a list": {"tools": [tool("p", input_schema={"type": "object", "properties": ["a"]})]},
    "required not a list": {"tools": [tool("r", input_schema={"type": "object", "required": "path"})]},
    "execution unknown": {"tools": [{**GOOD, "execution": {"taskSupport": "sometimes"}}]},
    "outputSchema without type": {"tools": [{**GOOD, "outputSchema": {"properties": {}}}]},
    "outputSchema of type array": {"tools": [{**GOOD, "outputSchema": {"type": "array"}}]},
}
"""Broken where the version's schema names the field (the 2025-11-25 models type `properties`,
`required`, `execution` and the output schema's `type`; 2026-07-28's leave them free)."""

MODERN_ONLY = {
    "no resultType": ({"ttlMs": 0, "cacheScope": "private", "tools": [GOOD]}, False),
    "no ttlMs": ({"resultType": "complete", "cacheScope": "private", "tools": [GOOD]}, False),
    "no cacheScope": ({"resultType": "complete", "ttlMs": 0, "tools": [GOOD]}, False),
    "ttlMs negative": ({**CACHE_HINTS, "ttlMs": -1, "tools": [GOOD]}, False),
    "ttlMs a fraction": ({**CACHE_HINTS, "ttlMs": 1.5, "tools": [GOOD]}, False),
    "ttlMs a whole float": ({**CACHE_HINTS, "ttlMs": 1000.0, "tools": [GOOD]}, True),
    "ttlMs a word": ({**CACHE_HINTS, "ttlMs": "soon", "tools": [GOOD]}, False),
    "ttlMs a numeral": ({**CACHE_HINTS, "ttlMs": "1000", "tools": [GOOD]}, True),
    "ttlMs huge": ({**CACHE_HINTS, "ttlMs": 2**80, "tools": [GOOD]}, True),
    "cacheScope unknown": ({**CACHE_HINTS, "cacheScope": "shared", "tools": [GOOD]}, False),
    "resultType other": ({**CACHE_HINTS, "resultType": "input_required", "tools": [GOOD]}, True),
    "resultType null": ({**CACHE_HINTS, "resultType": None, "tools": [GOOD]}, False),
    "_meta serverInfo of any shape": (
        {**CACHE_HINTS, "tools": [GOOD], "_meta": {"io.modelcontextprotocol/serverInfo": 3}},
        True,
    ),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", VALID)
def test_a_valid_listing_is_accepted_by_both(version: str, name: str) -> None:
    assert same_outcome(version, at(version, VALID[name])) == "accepted"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", INVALID)
def test_an_invalid_listing_is_refused_by_both_with_the_same_errors(version: str, name: str) -> None:
    assert same_outcome(version, at(version, INVALID[name])).startswith("ListToolsResult [{")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", BY_ERA)
def test_a_field_only_one_era_types_is_judged_alike(version: str, name: str) -> None:
    verdict = same_outcome(version, at(version, BY_ERA[name]))
    assert (verdict == "accepted") == (version == MODERN)


@pytest.mark.parametrize("name", MODERN_ONLY)
def test_cache_hints_are_judged_alike(name: str) -> None:
    result, valid = MODERN_ONLY[name]
    assert (same_outcome(MODERN, result) == "accepted") == valid
    assert same_outcome("2025-11-25", result) == "accepted", "a later revision's fields are ignored"


def test_the_errors_are_the_ones_the_poller_records() -> None:
    """What `pages.Paging._kept_despite` reads of a listing that breaks the schema, spelled out."""
    result = INVALID["inputSchema without type"]
    with pytest.raises(ValidationError) as caught:
        schema.validate_server_result("tools/list", "2025-11-25", result)
    assert [(e["loc"], e["msg"], e["type"]) for e in caught.value.errors()] == [
        (("tools", 0, "inputSchema", "type"), "Field required", "missing")
    ]


def nested(depth: int, as_list: bool) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value] if as_list else {"k": value}
    return value


PLACES = {
    "inputSchema keyword": lambda v: {"tools": [tool("t", input_schema={"type": "object", "x": v})]},
    "property schema": lambda v: {
        "tools": [tool("t", input_schema={"type": "object", "properties": {"p": {"x": v}}})]
    },
    "outputSchema keyword": lambda v: {"tools": [{**GOOD, "outputSchema": {"type": "object", "x": v}}]},
    "tool _meta": lambda v: {"tools": [{**GOOD, "_meta": {"k": v}}]},
    "annotation hint": lambda v: {"tools": [tool("t", annotations={"futureHint": v})]},
    "result _meta": lambda v: {"tools": [GOOD], "_meta": {"k": v}},
    "a hint that must be a bool": lambda v: {"tools": [tool("t", annotations={"readOnlyHint": v})]},
}


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
@pytest.mark.parametrize("as_list", [False, True], ids=["objects", "arrays"])
@pytest.mark.parametrize("place", PLACES)
def test_every_nesting_the_json_parser_takes_is_judged_alike(version: str, as_list: bool, place: str) -> None:
    """The SDK's dump fails past pydantic-core's serializer depth where validation alone does not; no
    answer the transports parse is nested that deep (their parser stops first). Should either limit
    move, the deepest answers parsed here are judged differently and this fails."""
    depth = 0
    while depth < 2_000:
        result = at(version, PLACES[place](nested(depth, as_list)))
        answer = json.dumps({"jsonrpc": "2.0", "id": 1, "result": result})
        try:
            mcp_types.jsonrpc_message_adapter.validate_json(answer, by_name=False)
        except ValidationError:
            break  # nested past what the parser takes: no session is handed it
        same_outcome(version, result)
        depth += 1
    assert 100 < depth < 2_000, "the parser's nesting limit is where this test expects it"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


def either(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value: mostly one of the right shape, sometimes any JSON at all."""
    return st.one_of(valid, valid, json_values)


hints = st.fixed_dictionaries(
    {},
    optional={
        key: either(st.booleans() | st.none())
        for key in ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
    }
    | {"title": either(st.text(max_size=8)), "x-hint": json_values},
)
object_schemas = st.fixed_dictionaries(
    {},
    optional={
        "type": either(st.sampled_from(["object", "array", "string"])),
        "properties": either(
            st.dictionaries(
                st.text(max_size=6),
                st.booleans()
                | st.dictionaries(st.sampled_from(["type", "description"]), st.text(max_size=6)),
                max_size=3,
            )
        ),
        "required": either(st.lists(st.text(max_size=6), max_size=3)),
        "$schema": either(st.just("https://json-schema.org/draft/2020-12/schema")),
        "additionalProperties": json_values,
    },
)
icons = st.fixed_dictionaries(
    {},
    optional={
        "src": either(st.just("data:,")),
        "mimeType": either(st.just("image/png")),
        "sizes": either(st.lists(st.just("48x48"), max_size=2)),
        "theme": either(st.sampled_from(["dark", "light", "dim"])),
    },
)
tools = st.fixed_dictionaries(
    {"name": either(st.text(max_size=8)), "inputSchema": either(object_schemas)},
    optional={
        "title": either(st.text(max_size=8)),
        "description": either(st.text(max_size=16)),
        "annotations": either(hints),
        "outputSchema": either(object_schemas),
        "icons": either(st.lists(icons, max_size=2)),
        "execution": either(st.fixed_dictionaries({"taskSupport": st.sampled_from(["forbidden", "maybe"])})),
        "_meta": either(st.dictionaries(st.text(max_size=6), json_values, max_size=2)),
        "x-vendor": json_values,
    },
)
results = st.fixed_dictionaries(
    {"tools": either(st.lists(either(tools), max_size=4))},
    optional={
        "nextCursor": either(st.text(max_size=8)),
        "_meta": either(st.dictionaries(st.text(max_size=6), json_values, max_size=2)),
        "resultType": either(st.just("complete")),
        "ttlMs": either(st.integers(min_value=-5, max_value=10**6)),
        "cacheScope": either(st.sampled_from(["public", "private", "shared"])),
    },
)


@settings(max_examples=500)
@given(version=st.sampled_from(VERSIONS), result=results)
def test_any_listing_is_judged_alike(version: str, result: dict[str, Any]) -> None:
    same_outcome(version, result)


def test_other_methods_and_surfaces_are_the_sdks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a `tools/list` result of a known version, checked against the SDK's own map, skips the
    SDK's function (whose work is `serialize_server_result`)."""
    sdk_checked: list[str] = []
    sdk_serialize = methods.serialize_server_result

    def serialize(method: str, version: str, data: Any, **kwargs: Any) -> dict[str, Any]:
        sdk_checked.append(method)
        return sdk_serialize(method, version, data, **kwargs)

    monkeypatch.setattr(methods, "serialize_server_result", serialize)
    assert methods.validate_server_result is schema.validate_server_result, "the SDK's session calls ours"
    listing = {"tools": [GOOD]}
    methods.validate_server_result("tools/list", "2025-11-25", listing)
    assert sdk_checked == []
    methods.validate_server_result("ping", "2025-11-25", {})
    assert sdk_checked == ["ping"]
    methods.validate_server_result("tools/list", "2025-11-25", listing, surface=dict(methods.SERVER_RESULTS))
    assert sdk_checked == ["ping", "tools/list"]
    with pytest.raises(ValueError, match="known protocol version"):
        methods.validate_server_result("tools/list", "2099-01-01", listing)
    with pytest.raises(KeyError):
        methods.validate_server_result("logging/setLevel", MODERN, {})
    assert sdk_checked == ["ping", "tools/list", "tools/list", "logging/setLevel"]


@pytest.mark.parametrize(("era", "version"), [("handshake", "2025-11-25"), ("modern", MODERN)])
async def test_a_poll_checks_its_pages_without_the_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, era: str, version: str
) -> None:
    """Through the SDK's session on a real server: every page is checked (a broken one is reported
    with the SDK's errors), none is dumped; `initialize`'s answer still is (`server/discover`'s
    never goes through that check)."""
    dumped: list[str] = []
    sdk_serialize = methods.serialize_server_result

    def serialize(method: str, version: str, data: Any, **kwargs: Any) -> dict[str, Any]:
        dumped.append(method)
        return sdk_serialize(method, version, data, **kwargs)

    monkeypatch.setattr(methods, "serialize_server_result", serialize)
    listing = [GOOD, tool("list_dir"), tool("read_file_2", input_schema={"properties": {"path": {}}})]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(listing), encoding="utf-8")
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "2") as url:
        fetched = await fetch_listing(
            Target(name="s", transport="http", url=url, era=era), Limits(timeout=10)
        )
    assert (fetched.protocol_version, fetched.pages, fetched.tools) == (version, 2, listing)
    assert set(fetched.validation_errors) == {"page 2: tools.0.inputSchema.type: Field required"}
    assert dumped == (["initialize"] if era == "handshake" else []), "only other answers are dumped"


async def test_the_same_answer_text_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls that get back the text of a page the check already passed (a server answering with
    plain JSON, the same listing each time) pass it without validating it again."""
    checked: list[str] = []
    monkeypatch.setattr(schema, "_passed", set())  # nothing another test's polls passed
    for model in set(schema.LISTING_MODELS.values()):  # versions share models: each wrapped once
        monkeypatch.setattr(model, "model_validate", counted(model.model_validate, checked))
    with raw_fleet(2) as served:
        for url in [*served.urls, *served.urls, served.urls[0]]:
            fetched = await fetch_listing(Target(name="s", transport="http", url=url), Limits(timeout=10))
            assert len(fetched.tools) == 5 and fetched.validation_errors == []
    assert len(checked) == 2, "each server's listing (a text of its own) once"


def test_a_page_that_broke_the_schema_is_checked_every_time() -> None:
    """Only passes are remembered: the same broken text is refused, with its errors, each time."""
    content = json.dumps({"tools": [{"name": "broken", "inputSchema": {}}]}).encode()
    for _ in range(2):
        result = pydantic_core.from_json(content)
        schema.answered(result, content)
        with pytest.raises(ValidationError, match=r"inputSchema\.type"):
            methods.validate_server_result("tools/list", "2025-11-25", result)


def counted(validate: Callable[..., Any], checked: list[str]) -> Callable[..., Any]:
    def count(*args: Any, **kwargs: Any) -> Any:
        checked.append(validate.__qualname__)
        return validate(*args, **kwargs)

    return count


async def test_the_same_answer_text_sent_as_sse_is_checked_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The SDK's own server answers every request as an SSE event (`text/event-stream`): a listing
    polled three times is validated once, as a plain JSON answer is, and what it holds is the same."""
    checked: list[str] = []
    monkeypatch.setattr(schema, "_passed", set())
    for model in set(schema.LISTING_MODELS.values()):
        monkeypatch.setattr(model, "model_validate", counted(model.model_validate, checked))
    listing = [GOOD, tool("list_dir")]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(listing), encoding="utf-8")
    with http_server("fastmcp_server.py", str(tools_file)) as url:
        for _ in range(3):
            fetched = await fetch_listing(Target(name="s", transport="http", url=url), Limits(timeout=10))
            assert fetched.tools == listing and fetched.validation_errors == []
    assert len(checked) == 1
