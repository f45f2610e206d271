"""Downgrading keeps what the database holds: on SQLite, a migration that alters a table in batch
mode copies it and drops the original, and with foreign keys enforced that drop would delete every
row that references it (versions, attempts, findings, alerts) through their ON DELETE CASCADE."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, text
from support import record_poll, tool

from monitor.config import ServerConfig
from monitor.store import Store, current_revision, downgrade, migrate
from monitor.store.registration import sync_servers

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
TABLES = ("servers", "snapshots", "poll_attempts", "findings", "listings")


def counts(store: Store) -> dict[str, int]:
    with store.engine.connect() as connection:
        return {
            name: connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one() for name in TABLES
        }


def test_a_downgrade_past_batch_altered_tables_keeps_every_row(fresh_engine: Engine) -> None:
    """0016 and 0015 both alter `servers`, which every per-server table references; after going down
    to 0012 and up again, every row is where it was, and foreign keys are enforced again."""
    migrate(fresh_engine)
    store = Store(fresh_engine)
    ids = sync_servers(store, [ServerConfig(name="kept", transport="stdio", command="x")], T0)
    record_poll(store, ids["kept"], [tool("search", read_only=True)], T0)
    record_poll(store, ids["kept"], [tool("search", read_only=False)], T0.replace(hour=10))
    before = counts(store)
    assert before["snapshots"] == 2 and before["findings"] >= 1

    downgrade(fresh_engine, "0012")
    assert current_revision(fresh_engine) == "0012"
    assert counts(store) == before
    migrate(fresh_engine)
    assert counts(store) == before
    if fresh_engine.dialect.name == "sqlite":
        with fresh_engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
