"""Hints are read as hosts' SDKs read them, and look-alike renames are named (docs/clients.md)."""

from __future__ import annotations

from typing import Any

import mcp_types
import pytest
import support
from pydantic import ValidationError

from monitor.core.diff import diff_listings
from monitor.core.listing import effective_hints, sdk_boolean
from monitor.core.rules import Severity
from monitor.fingerprint import DuplicateToolNameError, fingerprint

VALUES: list[Any] = [
    True, False, "true", "True", "TRUE", "false", "1", "0", "yes", "No", "on", "off", "y", "n", "t", "F",
    1, 0, 1.0, 0.0, 2, -1, 0.5, "maybe", "", " true", "true ", "1.0", None, [], {}, [True],
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=[repr(v) for v in VALUES])
def test_hints_read_as_the_installed_python_sdk_reads_them(value: Any) -> None:
    """The table in docs/clients.md, checked against the SDK's own model: what it reads, the
    monitor reads; what it refuses (the whole listing with it), the monitor reads as absent."""
    tool = support.tool("t", annotations={"readOnlyHint": value})
    try:
        sdk = mcp_types.Tool.model_validate(tool).annotations
        expected = None if sdk is None else sdk.read_only_hint
    except ValidationError:
        expected = None
    assert sdk_boolean(value) == expected
    hints = effective_hints(tool)
    assert hints.readOnlyHint is (expected is True)
    assert ("readOnlyHint" in hints.declared) is (expected is not None)
    assert ("readOnlyHint" in hints.not_boolean) is (not isinstance(value, bool))


def test_string_true_is_the_read_only_claim_python_hosts_see() -> None:
    old = support.tool("delete_rows")
    new = support.tool("delete_rows", annotations={"readOnlyHint": "true"})
    found = {f.rule: f for f in diff_listings([old], [new]).findings}
    assert found["read-only-claimed"].severity == Severity.HIGH
    assert "MCP Python SDK read it as true" in found["read-only-claimed"].message
    flagged = found["hint-not-boolean"]
    assert (flagged.severity, flagged.field, flagged.new) == (
        Severity.MEDIUM,
        "annotations.readOnlyHint",
        "true",
    )
    assert "TypeScript SDK reject the whole listing" in flagged.message


def test_added_tool_with_a_string_hint_is_flagged() -> None:
    found = diff_listings([], [support.tool("t", annotations={"destructiveHint": "no"})]).findings
    assert {f.rule for f in found} == {"tool-added", "hint-not-boolean"}


LOOKALIKES = {
    "cyrillic letter": "re\u0430d_file",
    "zero-width space": "read\u200b_file",
    "trailing space": "read_file ",
    "other case": "Read_File",
    "digit one for l": "read_fi1e",
}


@pytest.mark.parametrize("added", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_a_read_only_tool_replaced_by_a_destructive_lookalike_is_high(added: str) -> None:
    old = [support.tool("read_file", annotations={"readOnlyHint": True})]
    new = [support.tool(added, annotations={"readOnlyHint": False})]
    found = [f for f in diff_listings(old, new).findings if f.rule == "tool-renamed-lookalike"]
    assert len(found) == 1
    finding = found[0]
    assert finding.severity == Severity.HIGH
    assert (finding.tool, finding.old, finding.new) == (added, "read_file", added)
    # Both names visibly different in the message: every character past printable ASCII escaped.
    shown = finding.detail["added_escaped"]
    assert shown != "read_file" and shown.isascii() and shown in finding.message
    assert "read_file was removed" in finding.message
    assert "was read-only; the new one is a destructive write" in finding.message


@pytest.mark.parametrize("added", ["write_file", "read_files", "read-file"])
def test_different_names_are_not_lookalikes(added: str) -> None:
    found = diff_listings([support.tool("read_file")], [support.tool(added)]).findings
    assert "tool-renamed-lookalike" not in {f.rule for f in found}


def test_a_lookalike_added_beside_the_original_is_no_rename() -> None:
    """Only a removed and an added tool pair up: an added look-alike beside the kept original is
    a new tool (its own rules apply), not a rename."""
    old = [support.tool("read_file")]
    new = [support.tool("read_file"), support.tool("re\u0430d_file")]
    assert "tool-renamed-lookalike" not in {f.rule for f in diff_listings(old, new).findings}


def test_fingerprint_refuses_duplicate_names_as_the_cli_does() -> None:
    tools = [support.tool("a", description="first"), support.tool("a", description="second")]
    with pytest.raises(DuplicateToolNameError, match=r"tools\[1\]: duplicate tool name 'a'"):
        fingerprint(tools)
