"""The migration suite: upgrades from what older releases left in a database, and downgrades. Each
test starts from an empty database and migrates it to the revision it starts from itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from monitor.store import make_engine


@pytest.fixture
def fresh_engine(database_url: str) -> Iterator[Engine]:
    """An engine on a new, empty database (SQLite, and PostgreSQL when configured): no schema at all."""
    engine = make_engine(database_url)
    yield engine
    engine.dispose()
