"""Reading a hook's input (`monitor.approvals.inputs`): the recursion-free scanner reads exactly what
`json.loads` reads, down to the levels it keeps, and refuses exactly what it refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.approvals.inputs import KEPT_DEPTH, Unreadable, _scan, read_object

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


def kept(value: Any, level: int = 1) -> Any:
    """`value` as the scanner keeps it: containers deeper than KEPT_DEPTH read as None."""
    if isinstance(value, dict | list) and level > KEPT_DEPTH:
        return None
    if isinstance(value, dict):
        return {key: kept(inner, level + 1) for key, inner in value.items()}
    if isinstance(value, list):
        return [kept(inner, level + 1) for inner in value]
    return value


@given(values, st.sampled_from(["", " ", "\n\t ", "\r\n"]))
def test_the_scanner_reads_what_json_reads(value: Any, space: str) -> None:
    text = space + json.dumps(value, indent=1 if space else None) + space
    assert _scan(text) == kept(json.loads(text))


@given(st.text(alphabet='{}[],:"\\ 0123456789.eE+-truefalsn', max_size=30))
def test_the_scanner_refuses_what_json_refuses(text: str) -> None:
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(Unreadable):
            _scan(text)
        return
    assert _scan(text) == kept(expected)


def test_an_input_nested_past_the_recursion_limit_is_read_without_it() -> None:
    deep = '{"tool_name": "mcp__s__t", "tool_input": ' + "[" * 50_000 + "]" * 50_000 + ', "session_id": "x"}'
    assert read_object(deep.encode()) == {"tool_name": "mcp__s__t", "tool_input": [None], "session_id": "x"}
    with pytest.raises(Unreadable, match="not JSON"):
        read_object(deep[:-2].encode())
    with pytest.raises(Unreadable, match="not a JSON object"):
        read_object(b"[" * 5000 + b"]" * 5000)
