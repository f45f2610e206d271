"""Fingerprint v2 (RFC 8785) against the shared vectors, and fingerprint and diff properties over
arbitrary JSON tools (hypothesis)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core.diff import diff_listings
from monitor.core.fingerprint import (
    CanonicalListing,
    NotIJSONError,
    canonical_form,
    fingerprint,
    tool_fingerprint,
)
from monitor.core.listing import ListingError, parse_listing

VECTORS = json.loads((Path(__file__).parent / "data" / "fingerprint-vectors.json").read_text("utf-8"))[
    "vectors"
]
SAFE = 2**53 - 1
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-SAFE, SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
hint_values = st.none() | st.booleans() | st.just("true") | st.integers(0, 1)
annotations = st.dictionaries(
    st.sampled_from(["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title", "x"]),
    hint_values | st.text(max_size=5),
)
tool_fields = st.fixed_dictionaries(
    {},
    optional={
        "description": st.text(max_size=40) | json_values,
        "title": st.text(max_size=10) | json_values,
        "inputSchema": json_values,
        "outputSchema": json_values,
        "annotations": annotations | json_values,
        "_meta": json_values,
        "x-vendor": json_values,
    },
)


@st.composite
def listings(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(st.text(max_size=6), unique=True, max_size=6))
    return [{"name": name, **draw(tool_fields)} for name in names]


def spec_fingerprint(tools: list[dict[str, Any]]) -> str:
    """docs/contract.md section 2, written out literally with the stock JCS library."""
    stripped = [{k: v for k, v in tool.items() if k != "_meta"} for tool in tools]
    stripped.sort(key=lambda tool: tool["name"].encode("utf-16-be"))
    return hashlib.sha256(rfc8785.dumps(stripped)).hexdigest()


def shuffled_keys(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled_keys(child, rng) for key, child in items}
    if isinstance(value, list):
        return [shuffled_keys(child, rng) for child in value]
    return value


@given(listings())
def test_fingerprint_matches_spec_formula(tools: list[dict[str, Any]]) -> None:
    assert fingerprint(tools) == spec_fingerprint(tools)
    assert CanonicalListing.of(tools).fingerprint == fingerprint(tools)


@given(listings())
def test_a_known_listing_computes_the_same_forms_when_read(tools: list[dict[str, Any]]) -> None:
    """`CanonicalListing.known` (a listing seen again, its fingerprint remembered) defers the forms;
    read, they are the ones `of` computes, and so is everything built on them."""
    built = CanonicalListing.of(tools)
    known = CanonicalListing.known(json.loads(json.dumps(tools)), built.fingerprint)
    assert known.forms == built.forms and known.canonical == built.canonical and known == built


@given(listings(), st.randoms(use_true_random=False))
def test_fingerprint_ignores_tool_order_and_key_order(
    tools: list[dict[str, Any]], rng: random.Random
) -> None:
    reordered = shuffled_keys(tools, rng)
    rng.shuffle(reordered)
    assert fingerprint(reordered) == fingerprint(tools)


@given(listings())
def test_diff_of_a_listing_with_itself_is_empty(tools: list[dict[str, Any]]) -> None:
    assert diff_listings(tools, json.loads(json.dumps(tools))).findings == []


@settings(max_examples=150)
@given(listings(), listings())
@pytest.mark.slow
def test_diff_never_crashes_and_findings_are_well_formed(
    old: list[dict[str, Any]], new: list[dict[str, Any]]
) -> None:
    result = diff_listings(old, new)
    if fingerprint(old) != fingerprint(new):
        assert result.findings, "a changed listing is always explained"
    for finding in result.findings:
        json.dumps(finding.to_dict())
        assert finding.message


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_shared_vectors(vector: dict[str, Any]) -> None:
    assert canonical_form(vector["tools"]) == vector["canonical"].encode("utf-8")
    assert fingerprint(vector["tools"]) == vector["fingerprint"]
    assert hashlib.sha256(vector["canonical"].encode("utf-8")).hexdigest() == vector["fingerprint"]


def test_shared_vectors_through_the_public_import_path() -> None:
    from monitor.fingerprint import fingerprint as public

    assert [public(v["tools"]) for v in VECTORS] == [v["fingerprint"] for v in VECTORS]


def test_known_fingerprint_vector() -> None:
    tools = [{"name": "b", "x": 1, "_meta": {"v": 1}}, {"name": "a", "description": "é"}]
    body = '[{"description":"é","name":"a"},{"name":"b","x":1}]'.encode()
    assert canonical_form(tools) == body
    assert fingerprint(tools) == hashlib.sha256(body).hexdigest()
    assert tool_fingerprint(tools[1]) == hashlib.sha256('{"description":"é","name":"a"}'.encode()).hexdigest()


def test_numbers_are_read_as_doubles() -> None:
    """What json.dumps could never match: 1.0 is 1, -0.0 is 0, an integer beyond 2^53 its double."""
    assert fingerprint([{"name": "a", "x": 1.0}]) == fingerprint([{"name": "a", "x": 1}])
    assert fingerprint([{"name": "a", "x": -0.0}]) == fingerprint([{"name": "a", "x": 0}])
    assert fingerprint([{"name": "a", "x": 2**53 + 1}]) == fingerprint([{"name": "a", "x": 2.0**53}])
    assert canonical_form([{"name": "a", "x": 1e16, "y": 2**64}]) == (
        b'[{"name":"a","x":10000000000000000,"y":18446744073709552000}]'
    )


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ('[{"name": "a\\ud800"}]', "tools[0].name: a string holds a lone surrogate"),
        ('[{"name": "a", "x": {"\\udc00": 1}}]', "tools[0].x: an object key holds a lone surrogate"),
        ('[{"name": "a"}, {"name": "b", "x": [NaN]}]', "tools[1].x[0]: NaN is not a JSON number"),
        ('[{"name": "a", "x": 1e400}]', "tools[0].x: Infinity is not a JSON number"),
        (
            '[{"name": "a", "x": 1' + "0" * 400 + "}]",
            "tools[0].x: an integer of 401 digits is beyond the double range",
        ),
    ],
)
def test_a_listing_that_is_not_i_json_is_an_error_that_says_where(raw: str, where: str) -> None:
    with pytest.raises(NotIJSONError, match="^" + where.replace("[", r"\[").replace("]", r"\]")):
        fingerprint(json.loads(raw))


def test_parse_listing_shapes_and_errors() -> None:
    tools = [{"name": "a"}]
    assert parse_listing({"tools": tools}) == tools
    assert parse_listing({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}) == tools
    assert parse_listing(tools) == tools
    cases = {
        "duplicate tool name 'a'": [{"name": "a"}, {"name": "a"}],
        "tools[1]: expected an object": [{"name": "a"}, 3],
        "tools[0]: tool has no string 'name'": [{"title": "x"}],
        "JSON-RPC error response": {"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "m"}},
        "no 'tools' key": {"result": {}},
        "expected a list of tools": {"tools": {"a": 1}},
    }
    for expected, data in cases.items():
        try:
            parse_listing(data)
        except ListingError as exc:
            assert expected in str(exc)
        else:
            raise AssertionError(f"no error for {data!r}")


def test_the_fingerprint_command_matches_every_vector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.cli import main

    for index, vector in enumerate(VECTORS):
        listing = tmp_path / f"vector-{index}.json"
        listing.write_text(json.dumps({"tools": vector["tools"]}, ensure_ascii=False), encoding="utf-8")
        assert main(["fingerprint", str(listing)]) == 0
        assert capsys.readouterr().out.strip() == vector["fingerprint"], vector["name"]


def test_the_fingerprint_command_says_where_a_listing_is_not_i_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.cli import main

    listing = tmp_path / "nan.json"
    listing.write_text('{"tools": [{"name": "a", "inputSchema": {"maximum": NaN}}]}')
    assert main(["fingerprint", str(listing)]) == 2
    error = capsys.readouterr().err
    assert (
        error.count("\n") == 1
        and "not I-JSON: tools[0].inputSchema.maximum: NaN is not a JSON number" in error
    )


any_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=250)
@given(any_json)
@pytest.mark.slow
def test_the_fast_path_writes_exactly_what_rfc8785_writes(value: Any) -> None:
    """`json.dumps` is used where it provably writes RFC 8785; the stock library is the reference."""
    from monitor.core.fingerprint import as_doubles, canonical_json

    assert canonical_json(value) == rfc8785.dumps(as_doubles(value))


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, False, None, 'x"\\\n\u0001\u007f\u2028</script>']},
        {"\uff61": 1, "\U0001f600": 2, "z": 3},  # UTF-16 order differs from code-point order
        {"n": 9007199254740993, "m": -9007199254740993, "k": 9007199254740991},
        {"f": 1.0, "g": 1e16, "h": 1.5e-07, "i": -0.0, "s": "1.0 and 1e5 inside a string"},
    ],
)
def test_fast_and_slow_paths_on_the_edges(value: Any) -> None:
    from monitor.core.fingerprint import as_doubles, canonical_json

    assert canonical_json(value) == rfc8785.dumps(as_doubles(value))
