"""The schema check of a `tools/list` result, without the dump the SDK makes of it and throws away.

`ClientSession.send_request` (mcp 2.3.0) checks every result it reads with
`mcp_types.methods.validate_server_result` (mcp-types 2.3.0) against the negotiated version's wire
model. That function is `serialize_server_result` with its answer dropped: it validates the result
into the wire models, then dumps them back to a dict (by alias, JSON mode, without None). The
poller reads a listing as the dict the transport parsed (`pages.Raw`), so nothing uses that dict,
yet it costs about 40% of the check of every page of every poll (bench/bench_listing_check.py: a
50-tool page at 2025-11-25, 0.59 ms CPU with the dump, 0.36 ms without).

`validate_server_result` below replaces the SDK's function, here and nowhere else (the module is
imported by `pages`, which reads the listings). For a `tools/list` result of a known version,
checked against the SDK's own surface map, it runs the same validation on the same wire model and
stops there; every other call (another method, an unknown version, a caller's own surface map)
is the SDK's function, unchanged. The errors of a listing that breaks the schema are therefore
the SDK's, loc for loc (`pages.Paging._kept_despite` records them).

Skipping the dump changes no verdict: the dump of a result its wire model accepted fails only on
nesting deeper than pydantic-core's serializer goes (about 255 levels), and every result the
session is handed was parsed by pydantic-core's JSON parser (the SDK's transports' `validate_json`,
`transport.plain_response`'s `from_json`), which refuses a document nested past about 200.
tests/test_schema_check.py holds both checks to the same acceptance and the same errors on a broad
set of listings, at every depth the parser takes, so an SDK release that checks differently fails
it.

A page the check passed once is not checked again when the same text comes back (most polls see
the listing they saw last time): the transport notes the SHA-256 of the bytes it parsed a plain
JSON answer from (`answered`), and a `tools/list` result parsed from bytes whose digest already
passed at that version is passed without the validation. The same bytes parse to the same value,
so the verdict is the same; only passes are remembered, so a page that breaks the schema is
checked, and its errors reported, every time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextvars import ContextVar
from types import UnionType
from typing import Any

from mcp_types import methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import BaseModel

TOOLS_LIST = "tools/list"

sdk_validate_server_result = methods.validate_server_result
"""The SDK's check, for every call this module does not answer itself (and for the tests)."""

LISTING_MODELS: dict[str, type[BaseModel]] = {
    version: model
    for version in KNOWN_PROTOCOL_VERSIONS
    if isinstance(model := methods.SERVER_RESULTS.get((TOOLS_LIST, version)), type)
}
"""Each known version's wire model of a `tools/list` result, the one the SDK's check validates with
(a version whose row is a union of models, none yet, is left to the SDK's function)."""


PASSED_KEPT = 10_000
"""Digests of passed `tools/list` answers kept (about a megabyte); when full, they are forgotten."""

_passed: set[tuple[str, bytes]] = set()
_answer: ContextVar[tuple[dict[str, Any], bytes] | None] = ContextVar("answer", default=None)


def answered(result: dict[str, Any], content: bytes) -> None:
    """The transport parsed `result` from exactly `content`, in this task: the check of `result`,
    which comes next in the same task, may be spared if that text already passed (the text is
    hashed there, only for a `tools/list` result)."""
    _answer.set((result, content))


def validate_server_result(
    method: str,
    version: str,
    data: Mapping[str, Any],
    *,
    surface: Mapping[tuple[str, str], type[BaseModel] | UnionType] = methods.SERVER_RESULTS,
) -> None:
    """`mcp_types.methods.validate_server_result` (mcp-types 2.3.0), a `tools/list` result validated
    without the dump the SDK discards (see the module's docstring).

    Raises what the SDK's function raises: `pydantic.ValidationError` for a result that breaks the
    schema, with the same errors; ValueError for an unknown version, KeyError for a method the
    version lacks (both from the SDK's function itself).
    """
    answer = _answer.get()
    if answer is not None:
        _answer.set(None)
    listing = LISTING_MODELS.get(version) if method == TOOLS_LIST else None
    if listing is None or surface is not methods.SERVER_RESULTS:
        sdk_validate_server_result(method, version, data, surface=surface)
        return
    seen = None
    if answer is not None and answer[0] is data:
        seen = (version, hashlib.sha256(answer[1]).digest())
    if seen is not None and seen in _passed:
        return
    listing.model_validate(data, by_name=False)
    if seen is not None:
        if len(_passed) >= PASSED_KEPT:
            _passed.clear()
        _passed.add(seen)


methods.validate_server_result = validate_server_result
