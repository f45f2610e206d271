"""Reading every page of `tools/list` as one listing the server really served.

Pages carry no cross-page guarantee (2026-07-28 says so outright): a deploy between page 2 and
page 3 makes a pass that holds page 2 of one listing and page 3 of the next, a listing the server
never served, and no re-check of the first or the last page can see it (the deploy may leave both
alike). So a listing of several pages is read until two passes in a row agree, tool for tool
(`_meta` aside: it is volatile, docs/contract.md section 2), at most `MAX_PASSES` passes; one that
never settles is a `torn-listing` failure. A listing of one page is one answer, consistent by
itself. A stale cursor (JSON-RPC -32602 on a page asked for with a cursor, what a server answers
when its listing changed under the cursor) restarts the listing from the first page, once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import mcp_types as types
import pydantic_core
from mcp.client import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import RootModel, ValidationError

from monitor.collect.client import schema as _schema  # noqa: F401 - pages checked without the SDK's dump
from monitor.collect.client.errors import Attempt, clip
from monitor.collect.client.target import Listed, PollError
from monitor.core.fingerprint import without_meta
from monitor.core.states import PollErrorKind

MAX_PASSES = 5
"""Passes over every page of a paged listing before it is given up as torn (two must agree)."""
MAX_VALIDATION_ERRORS = 20
"""Schema violations recorded per listing; the count of the rest is kept."""


class Raw(RootModel[dict[str, Any]]):
    """A result kept as the dict the transport parsed, after the SDK's schema check (for a
    `tools/list` page, that check without the dump nothing reads: `schema`)."""


class StaleCursor(Exception):
    """The server refused a cursor it handed out (-32602) on this page."""

    def __init__(self, page: int, error: MCPError) -> None:
        super().__init__(page)
        self.page = page
        self.error = error


def identity(listed: Listed) -> bytes:
    """SHA-256 of the pass's tools without `_meta`, as JSON: two passes that agree on it served the
    same listing (JSON text, so `true` and `1` differ as they do in the fingerprint)."""
    tools = [without_meta(tool) for tool in listed.tools]
    try:
        text = pydantic_core.to_json(tools)
    except pydantic_core.PydanticSerializationError:  # a lone surrogate: the standard library writes it
        text = json.dumps(tools, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).digest()


class Paging(Attempt):
    """The page-reading half of a poll (`Poll` extends it)."""

    last_result: dict[str, Any] | None
    """The result of the newest JSON-RPC response read, as parsed, before any schema check."""
    invalid: list[str]

    async def _list_consistently(self, session: ClientSession) -> Listed:
        """Every page, read until one pass is confirmed by the next (see the module's docstring)."""
        previous: bytes | None = None
        restarted = False
        passes = 0
        while passes < MAX_PASSES:
            passes += 1
            try:
                listed = await self._list(session)
            except StaleCursor as stale:
                if restarted:
                    raise PollError(
                        PollErrorKind.SERVER_ERROR,
                        f"server refused its own cursor on page {stale.page} again after the listing "
                        f"was read from the first page: {clip(stale.error.error.message)!r} "
                        f"(code {stale.error.error.code})",
                    ) from None
                restarted, previous = True, None
                continue
            if listed.pages == 1:
                listed.refetches = passes - 1
                return listed
            current = identity(listed)
            if current == previous:
                listed.refetches = passes - 2  # the passes that disagreed with the one after them
                return listed
            previous = current
        raise PollError(
            PollErrorKind.TORN_LISTING,
            f"the listing changed while it was paged: no two of {MAX_PASSES} passes over its pages "
            "agreed, so there is no consistent listing to record",
        )

    async def _list(self, session: ClientSession) -> Listed:
        limits = self.limits
        listed = Listed()
        self.invalid = []  # the recorded pass's violations, not those of every pass read before it
        cursors: set[str] = set()
        cursor: str | None = None
        while True:
            if listed.pages == limits.max_pages:
                raise PollError(
                    PollErrorKind.LIMIT, f"listing exceeds {limits.max_pages} pages (cursor loop?)"
                )
            listed.pages += 1
            pages = listed.pages
            self.stage = "tools/list" if pages == 1 else f"tools/list (page {pages})"
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            self.last_result = None
            try:
                result = (await session.send_request(types.ListToolsRequest(params=params), Raw)).root
            except ValidationError as exc:
                result = self._kept_despite(exc, listed.pages)
            except MCPError as exc:
                if cursor is not None and exc.error.code == types.INVALID_PARAMS:
                    raise StaleCursor(pages, exc) from exc
                raise
            listed.size += listed.measure(result)
            if listed.size > limits.max_bytes:
                raise PollError(
                    PollErrorKind.LIMIT, f"listing exceeds {limits.max_bytes} bytes (at page {pages})"
                )
            listed.tools.extend(result["tools"])
            listed.cache_hints(result)
            if len(listed.tools) > limits.max_tools:
                raise PollError(
                    PollErrorKind.LIMIT, f"listing exceeds {limits.max_tools} tools (at page {pages})"
                )
            cursor = result.get("nextCursor")
            if cursor is None:
                return listed
            if cursor in cursors:
                raise PollError(
                    PollErrorKind.LIMIT,
                    f"server repeated cursor {clip(cursor)!r} on page {pages} (cursor loop)",
                )
            cursors.add(cursor)

    def _kept_despite(self, error: ValidationError, page: int) -> dict[str, Any]:
        """A tools/list page that breaks the schema hosts validate against (an `inputSchema` without
        `"type": "object"`, say): kept as sent, with where it breaks, when it still holds a tools array."""
        result = self.last_result
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            raise error
        details = error.errors()
        room = MAX_VALIDATION_ERRORS - len(self.invalid)
        where = "" if page == 1 else f"page {page}: "
        for detail in details[: max(room, 0)]:
            location = ".".join(str(part) for part in detail["loc"]) or "result"
            self.invalid.append(clip(f"{where}{location}: {detail['msg']}"))
        if len(details) > room > -1:
            self.invalid.append(f"{where}and {len(details) - max(room, 0)} more schema violation(s)")
        return result
