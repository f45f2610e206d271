"""The API's shared vocabulary: its JSON answer, the error body, text patterns, paging and request bodies."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Self, TypeVar

from fastapi import HTTPException, Query
from fastapi.responses import JSONResponse
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    StringConstraints,
)

from monitor.core.hosts import REFUSED_NAMES
from monitor.core.ijson import storable
from monitor.core.rules import CATALOG


class ApiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: listings may carry lone surrogates that UTF-8 cannot encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


# --- errors ----------------------------------------------------------------------------------


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    """Every error answer: `detail` says what was wrong; `errors` lists each invalid field (422)."""

    detail: str
    errors: list[ErrorItem] | None = None


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "A token is configured and the request did not carry it"},
    422: {"model": ErrorOut, "description": "A parameter or the body is invalid; `errors` says which"},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    403: {"model": ErrorOut, "description": "No API token is configured, so changes are refused"},
}


def not_found(what: str) -> dict[int | str, dict[str, Any]]:
    return {404: {"model": ErrorOut, "description": f"No such {what}"}}


def unprocessable(loc: Sequence[str | int], message: str) -> HTTPException:
    return HTTPException(422, f"{'.'.join(str(p) for p in loc)}: {message}")


def _read_as_utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_read_as_utc)]
"""An ISO 8601 time; one without an offset is read as UTC, as the dashboard reads it."""


def utc(value: datetime, loc: Sequence[str | int]) -> datetime:
    """The instant in UTC; an offset that pushes it outside the representable years is a 422."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise unprocessable(loc, "the instant is outside the representable years 1-9999") from None


# --- patterns --------------------------------------------------------------------------------

INT32_MAX = 2_147_483_647
"""Ids and versions are 32-bit integers in PostgreSQL; larger numbers cannot name a row."""
SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
FINGERPRINT = r"^[0-9a-f]{64}$"
NO_NUL = r"^[^\x00]*$"
"""Free text that goes into the database: PostgreSQL refuses NUL characters in text."""


def _storable(value: str) -> str:
    if not storable(value):
        raise ValueError("must not contain NUL characters or lone surrogates")
    return value


StoredText = Annotated[str, AfterValidator(_storable)]
"""Free text a request stores (names, notes, ids): no NUL, no lone surrogates, or a 422 naming the
field. Give it `pattern=NO_NUL` too, so that the OpenAPI document says so."""
ShortStoredText = Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL), AfterValidator(_storable)]
"""`StoredText` of at most 200 characters, its constraints on the string itself: inside an optional
(`ShortStoredText | None`) the OpenAPI document keeps them, where `Field(pattern=...)` on the
union loses the pattern (and a schema-valid NUL would be refused)."""
ToolNameText = Annotated[
    str, StringConstraints(min_length=1, max_length=1000, pattern=NO_NUL), AfterValidator(_storable)
]
"""A tool's name in a request body, constrained like `ShortStoredText` (so a list of them in an
optional field keeps its pattern in the OpenAPI document)."""

_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
URL_PATTERN = (
    rf"^https?://([A-Za-z0-9._~%!$&'()*+,;=:-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*(:{_PORT})?([/?#][!-~]*)?$"
)
"""An http(s) URL of printable ASCII with a host: what the poller can reach and the database can store."""


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


_REFUSED_HOSTS = "|".join(
    (
        r"([0-9a-fA-FxX]*\.)*0[xX][0-9a-fA-F]*(\.[0-9a-fA-FxX]*)*",  # hexadecimal parts
        r"[0-9]+(\.[0-9]+){0,2}\.?",  # fewer than four parts (2852039166)
        r"[0-9]+(\.[0-9]+){4,}\.?",
        r"([0-9]+\.)*0[0-9]+(\.[0-9]+)*\.?",  # octal parts
        r"0+\.[0-9.]*",  # 0.0.0.0/8
        r"169\.254\.[0-9]+\.[0-9]+\.?",  # link-local, cloud metadata
        r"100\.100\.100\.200\.?",
        r"(22[4-9]|2[3-9][0-9]|[3-9][0-9]{2}|[0-9]{4,})\.[0-9.]*",  # multicast, reserved
        *(_any_case(name) + r"\.?" for name in sorted(REFUSED_NAMES)),
    )
)
REFUSED_URL_PATTERN = rf"^https?://([^/?#@]*@)?({_REFUSED_HOSTS})([:/?#]|$)"
"""URLs whose host the default `allowed_server_hosts` refuses (and IPv4 addresses not written as four
decimal numbers), for the OpenAPI schema: so that every URL the schema allows is one the API accepts
unless an allow-list is configured. `HostPolicy` is what enforces it."""
PATTERN_MESSAGES = {
    "url": "must be an http:// or https:// URL of printable ASCII with a host (and a port up to 65535)",
    "name": "must start with a letter or digit and hold only letters, digits, '.', '_' and '-'",
    "server": "must start with a letter or digit and hold only letters, digits, '.', '_' and '-'",
    "fingerprint": "must be 64 lowercase hex characters (a SHA-256)",
    "session_id": "must not contain NUL characters",
    "client": "must not contain NUL characters",
    "headers": "header names must be HTTP tokens and values printable ASCII",
}
"""Plain words for pattern mismatches, by field name: the regex alone tells a person little."""
HeaderName = Annotated[str, StringConstraints(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,200}$")]
HeaderValue = Annotated[str, StringConstraints(pattern=r"^[\t\x20-\x7e]{0,8192}$")]


TOOLS_SCHEMA: dict[str, Any] = {
    "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    "description": "The tools the host cached, as the server sent them (names unique); the monitor "
    "fingerprints them",
}


# --- filters ---------------------------------------------------------------------------------


def _known_rule(value: str | None) -> str | None:
    if value is not None and value not in CATALOG:
        raise ValueError(f"unknown rule (known rules: {', '.join(sorted(CATALOG))})")
    return value


RuleId = Annotated[
    str | None,
    AfterValidator(_known_rule),
    Query(
        max_length=64,
        description="A rule id from the catalog (`drift-monitor rules`)",
        json_schema_extra={"enum": sorted(CATALOG)},
    ),
]
ToolName = Annotated[
    str | None,
    Query(min_length=1, max_length=1000, pattern=NO_NUL, description="A tool's exact name"),
]


# --- paging ----------------------------------------------------------------------------------

Limit = Annotated[int, Query(ge=1, le=500, description="Items per page")]
IntCursor = Annotated[
    int | None,
    Query(ge=0, le=INT32_MAX, description="`next_before` of the previous page: continue after it"),
]
Item = TypeVar("Item")
Cursor = TypeVar("Cursor", int, str)


class Page(BaseModel, Generic[Item, Cursor]):
    """One page of a list, newest or first items first."""

    items: list[Item]
    next_before: Cursor | None = Field(description="Pass as `before` for the next page; null on the last")

    @classmethod
    def of(cls, rows: Sequence[Item], limit: int, cursor: Callable[[Item], Cursor], **fields: Any) -> Self:
        """The first `limit` rows; `rows` are read one longer than a page, to know whether more follow."""
        items = list(rows[:limit])
        return cls(items=items, next_before=cursor(items[-1]) if len(rows) > limit else None, **fields)
