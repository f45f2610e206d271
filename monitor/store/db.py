"""The database: one engine per process, and the schema from Alembic migrations only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import monitor

ROOT = Path(monitor.__file__).resolve().parent.parent
"""The repository root, where alembic.ini and migrations/ live."""


REQUEST_THREADS = 40
"""Threads that run request handlers and their database work at once: anyio's default thread limiter,
which the web app keeps (`monitor.app` sets it, so a change of anyio's default cannot outgrow
the pool). Each may hold a connection."""
GATEWAY_THREADS = 8
"""Threads that answer agentgateway's gRPC calls (`monitor.approvals.gateway`); each may hold a
connection too."""
POOL_SIZE = 10
MAX_OVERFLOW = REQUEST_THREADS + GATEWAY_THREADS
"""Connections kept, and opened beyond them under load: room for every request thread, every gateway
thread and the background writers (the poll writer, the decision and audit writers, the deliverer)
at once, so a request waits for a thread, never for a connection. With the default pool (5 + 10) under 64
concurrent page requests, 40 threads shared the GIL, each holder kept its connection for seconds,
and the threads queued for one gave up after the pool's 30 s timeout: 500s
(`bench/bench_web.py`, the pages over 64 kept-alive connections)."""


def make_engine(url: str) -> Engine:
    """The process's engine. SQLite gets WAL, a busy timeout and enforced foreign keys."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).expanduser().resolve().parent.mkdir(parents=True, exist_ok=True)
        pool = {"pool_size": POOL_SIZE, "max_overflow": MAX_OVERFLOW} if database != ":memory:" else {}
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **pool)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW)


def render_url(url: str) -> str:
    """The database URL with any password hidden, for messages."""
    return make_url(url).render_as_string(hide_password=True)


def alembic_config(url: str | None = None) -> AlembicConfig:
    config = AlembicConfig(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def migrate(engine: Engine, revision: str = "head") -> str:
    """Bring the database to the newest schema (or up to `revision`); returns the head revision."""
    config = alembic_config()
    _run_alembic(engine, config, lambda: command.upgrade(config, revision))
    head = ScriptDirectory.from_config(config).get_current_head()
    return head or "base"


def downgrade(engine: Engine, revision: str) -> None:
    """Take the database back to `revision`, keeping every row the older schema can hold."""
    config = alembic_config()
    _run_alembic(engine, config, lambda: command.downgrade(config, revision))


def _run_alembic(engine: Engine, config: AlembicConfig, step: Callable[[], None]) -> None:
    """Run a migration step in one transaction on one connection.

    On SQLite, foreign keys are off while it runs: a migration that alters a table in batch mode
    copies it and drops the original, and with them enforced that drop deletes every row that
    references the table (`ON DELETE CASCADE`). The pragma only takes effect outside a
    transaction, so it is set before the step's and set back after it commits.
    """
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        try:
            with connection.begin():
                config.attributes["connection"] = connection
                step()
        finally:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


class SchemaNotReady(RuntimeError):
    """The database is not at the newest schema: `drift-monitor migrate` fixes it."""


def check_schema(engine: Engine) -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    current = current_revision(engine)
    if current != head:
        state = "empty" if current is None else f"at revision {current}"
        raise SchemaNotReady(f"database is {state}, not at {head}: run `drift-monitor migrate`")


def insert(session: Session) -> Any:
    """The dialect's INSERT, which knows ON CONFLICT DO NOTHING."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
