"""Column types: any I-JSON text stored exactly on both databases (`\\u0000` included), and aware
UTC datetimes.

PostgreSQL refuses the NUL character in `text` and in `jsonb` alike, while a server may put one in
a tool's name or description: one byte must not make a listing unstorable (and hide the change
that came with it). On PostgreSQL, a value holding a NUL is stored in an escaped form marked by a
prefix (text) or a one-key wrapper object (JSON), and read back exactly; a value that merely looks
like an escaped one is escaped too, so the mapping stays one-to-one. SQLite stores every value as it
is. Equality comparisons go through the same escaping, so lookups by name keep working.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Dialect, Text, TypeDecorator
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeEngine

TEXT_MARK = "\uffff"
"""Prefix of an escaped text value: a Unicode noncharacter, which ordinary text never starts with."""

JSON_MARK = "\uffffdrift-monitor:escaped-json"
"""The one key of the object an escaped JSON value is stored as."""


def _escaped(dialect: Dialect) -> bool:
    return dialect.name == "postgresql"


class SafeText(TypeDecorator[str]):
    """Text from servers we do not trust (tool names, session ids): kept exactly on both databases."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or not _escaped(dialect):
            return value
        if "\x00" in value or value.startswith(TEXT_MARK):
            return TEXT_MARK + json.dumps(value)
        return value

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        if value is not None and value.startswith(TEXT_MARK):
            decoded = json.loads(value[len(TEXT_MARK) :])
            return decoded if isinstance(decoded, str) else value
        return value


class StoredJSON(TypeDecorator[Any]):
    """JSON on SQLite, jsonb on PostgreSQL, with NUL characters kept (see the module docstring)."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSONB() if _escaped(dialect) else JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or not _escaped(dialect):
            return value
        if _is_wrapper(value):
            return {JSON_MARK: json.dumps(value)}
        text = json.dumps(value)
        if "\\u0000" in text:  # a NUL anywhere (or a literal backslash-u0000, escaped too: harmless)
            return {JSON_MARK: text}
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if _is_wrapper(value):
            return json.loads(value[JSON_MARK])
        return value


def _is_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(JSON_MARK), str)


JSONValue = StoredJSON()
"""JSON on SQLite, jsonb on PostgreSQL; a NUL character survives both (see `columns`)."""


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out; SQLite would otherwise hand back naive ones."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use an aware UTC datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
