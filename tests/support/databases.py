"""Databases for tests and benchmarks: a fresh schema of their own on the test PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text


@contextmanager
def postgres_schema(base_url: str, prefix: str = "t") -> Iterator[str]:
    """A new, empty schema on the PostgreSQL at `base_url`, dropped afterwards with all it holds;
    yields a URL whose connections use it (search_path), so parallel runs never meet."""
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        separator = "&" if "?" in base_url else "?"
        try:
            yield f"{base_url}{separator}options=-csearch_path%3D{schema}"
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()
