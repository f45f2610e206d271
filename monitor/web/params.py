"""The dashboard's query parameters: text from URLs people edit, read leniently (an empty field is no
value) and refused with a 422 page that says what was expected."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import HTTPException

from monitor.core.rules import Severity
from monitor.core.text import is_hidden
from monitor.web.schemas import INT32_MAX


def severity_param(value: str | None) -> Severity | None:
    if not value:
        return None
    try:
        return Severity.parse(value)
    except ValueError:
        raise HTTPException(422, f"min_severity: {value!r} is not a severity") from None


def exact_severity_param(value: str | None) -> Severity | None:
    if not value:
        return None
    try:
        return Severity.parse(value)
    except ValueError:
        raise HTTPException(422, f"severity: {value!r} is not a severity") from None


def number_param(value: str | None, name: str, *, minimum: int = 1) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or not minimum <= int(value) <= INT32_MAX:
        raise HTTPException(422, f"{name}: expected a whole number from {minimum}")
    return int(value)


def instant_param(value: str) -> datetime:
    """`2026-03-01T12:00`, with seconds or an offset; a time without an offset is read as UTC."""
    text = value.strip().replace(" ", "T")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(
            422, f"time: {value!r} is not an ISO 8601 time (e.g. 2026-03-01T12:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        raise HTTPException(422, "time: outside the representable years") from None


def safe_next(value: str | None, default: str = "/") -> str:
    """Only local paths: no scheme, no host, no `//` or backslash tricks, no line breaks."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(c in value for c in "\r\n\\") or any(is_hidden(c) for c in value):
        return default
    return value
