"""Storage: the schema, the poll transaction, read queries and retention."""

from monitor.store.db import (
    SchemaNotReady,
    alembic_config,
    check_schema,
    current_revision,
    downgrade,
    make_engine,
    migrate,
    render_url,
)
from monitor.store.polled import PollOutcome
from monitor.store.polls import PollHook, Store
from monitor.store.retention import prune_poll_attempts

__all__ = [
    "PollHook",
    "PollOutcome",
    "SchemaNotReady",
    "Store",
    "alembic_config",
    "check_schema",
    "current_revision",
    "downgrade",
    "make_engine",
    "migrate",
    "prune_poll_attempts",
    "render_url",
]
