"""The migrations as a whole: from an empty database to the newest revision, the schema is exactly
what the models describe, and migrating again changes nothing."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from monitor.store import current_revision, migrate
from monitor.store.schema import metadata


def test_migrations_from_empty_match_the_models(fresh_engine: Engine) -> None:
    assert current_revision(fresh_engine) is None
    head = migrate(fresh_engine)
    assert current_revision(fresh_engine) == head
    with fresh_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, metadata) == []
    migrate(fresh_engine)  # idempotent
