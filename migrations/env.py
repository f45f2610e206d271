"""Alembic environment: migrations are the only source of the schema."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from monitor.store import make_engine
from monitor.store.schema import metadata

config = context.config
target_metadata = metadata


def run(connection: Connection) -> None:
    if connection.dialect.name == "sqlite" and connection.exec_driver_sql("PRAGMA foreign_keys").scalar():
        # A batch-mode migration copies a table and drops the original; with foreign keys enforced,
        # the drop would delete every row referencing it. `monitor.store.migrate` and `downgrade`
        # (and this file's own engine, below) run migrations with them off.
        raise SystemExit("SQLite foreign keys are on: migrate with `drift-monitor migrate`")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        from monitor.config import MonitorSettings

        url = MonitorSettings().database_url
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":  # this engine is disposed of afterwards
                conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
                conn.commit()
            run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
main()
