"""The statements every decision runs, at the cost of the database driver alone.

A decision answers from a per-process cache (`monitor.approvals.cache`) and reads, every time, only
what the cache cannot know: the counters that say whether it is still current
(`monitor.store.generations`) and what every poll changes (when the server was last verified). Built
with SQLAlchemy and run through its `Session`, that one indexed read cost more CPU than everything
else a decision does (building the statement's cache key, an execution context, a result object), so
these statements are compiled once and run on DBAPI connections kept for them: a few microseconds on
SQLite, one round trip on PostgreSQL (in autocommit, so no transaction stays open between decisions).
On a SQLite file a kept connection answers again with the row it read while `PRAGMA data_version`
says nothing was committed since.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Engine, bindparam, select
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from monitor.store.models import DecisionNames, Server

KEPT = 4
"""Connections kept between reads (as many as read at once, usually: the event loop and the decision
lane's threads); one borrowed beyond them goes back to the engine's pool after its read."""


T = TypeVar("T")
MEMO = "drift_monitor_rows"
"""Where a kept SQLite connection keeps the rows it read, with the `data_version` they were read at."""
MEMO_ROWS = 4096

STATEMENT_TIMEOUT_MS = 2000
"""On PostgreSQL, a read that takes longer fails (and the decision fails closed) instead of holding up
the event loop that answers decisions."""


class Generations(NamedTuple):
    """The counters of what every process caches for decisions: the server names, the named tokens."""

    names: int
    tokens: int


class ServerRow(NamedTuple):
    """What a decision reads of a server's row every time (`monitor.approvals.cache.ServerState`)."""

    server_id: int
    generation: int
    last_verified: datetime | None
    last_polled: datetime | None
    unverifiable_reason: str | None
    interval_seconds: float | None


class Prepared:
    """A statement compiled once for the engine's dialect, with its parameters in the driver's form."""

    def __init__(self, engine: Engine, statement: ClauseElement) -> None:
        compiled = statement.compile(dialect=engine.dialect)
        assert isinstance(compiled, SQLCompiler), "a statement compiles to SQL"
        self.sql = compiled.string
        order, fixed = compiled.positiontup or [], compiled.params  # the statement's literals, bound

        def positional(given: dict[str, Any]) -> Any:
            return tuple(given[key] if key in given else fixed[key] for key in order)

        def named(given: dict[str, Any]) -> Any:
            return {**fixed, **given}

        self.arguments: Callable[[dict[str, Any]], Any] = positional if compiled.positional else named


def utc(value: datetime | str | None) -> datetime | None:
    """A timestamp as the driver hands it back, made the aware UTC datetime `UTCDateTime` gives:
    SQLite keeps text (`YYYY-MM-DD HH:MM:SS.ffffff`, in UTC), PostgreSQL an aware datetime."""
    if value is None:
        return None
    if isinstance(value, str):
        return _parsed(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> datetime:
    """A server's times change only when it is polled, and are read at every decision about it."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class StateReads:
    """The per-decision statements of one engine, on connections kept for them (thread-safe)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.postgresql = engine.dialect.name == "postgresql"
        generations = select(DecisionNames.generation, DecisionNames.tokens_generation)
        self._generations = Prepared(engine, generations.where(DecisionNames.id == 1))
        self._server = Prepared(
            engine,
            select(
                DecisionNames.generation,
                DecisionNames.tokens_generation,
                Server.id,
                Server.decision_generation,
                Server.last_success_at,
                Server.last_poll_at,
                Server.unverifiable_reason,
                Server.interval_seconds,
            )
            .select_from(DecisionNames)
            .outerjoin(Server, Server.name == bindparam("name"))
            .where(DecisionNames.id == 1),
        )
        database = engine.url.database
        self.memoised = engine.dialect.name == "sqlite" and bool(database) and database != ":memory:"
        self._lock = threading.Lock()
        self._idle: list[PoolProxiedConnection] = []
        self._driver_error: type[Exception] = engine.dialect.loaded_dbapi.Error

    def generations(self, session: Session | None = None) -> Generations:
        return self._one(self._generations, {}, session, _generations, None)

    def server(self, name: str, session: Session | None = None) -> tuple[Generations, ServerRow | None]:
        """The counters, and the row of the server named `name` (None: no such server). Read in
        `session` when one is given: a request that holds a connection must not wait for a second
        (under load every pooled connection can be held by a request waiting for another). While the
        database is unchanged (`_unchanged`), the same objects are handed back."""
        return self._one(self._server, {"name": name}, session, _server_row, name)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            self._release(connection)

    def _one(
        self,
        prepared: Prepared,
        given: dict[str, Any],
        session: Session | None,
        parse: Callable[[Any], T],
        key: Hashable,
    ) -> T:
        """The statement's first row, parsed; `key` tells its rows from the same statement's others."""
        if session is not None:
            return parse(session.connection().exec_driver_sql(prepared.sql, prepared.arguments(given)).one())
        kept = self._borrow()
        try:  # sqlite3's and psycopg's connections both run `execute`; all rows: the statement ends
            value = self._unchanged(kept, prepared, given, parse, key)
        except self._driver_error as exc:  # as SQLAlchemy raises it, which callers handle
            kept.invalidate()  # the next read gets a new connection
            arguments = prepared.arguments(given)
            raise DBAPIError.instance(prepared.sql, arguments, exc, self._driver_error) from exc
        except BaseException:
            kept.invalidate()
            raise
        self._give_back(kept)
        return value

    def _unchanged(
        self,
        kept: PoolProxiedConnection,
        prepared: Prepared,
        given: dict[str, Any],
        parse: Callable[[Any], T],
        key: Hashable,
    ) -> T:
        """The statement's first row, parsed. On a SQLite file, what this connection read before
        while `PRAGMA data_version` stays: it moves whenever any other connection, in this process
        or another, commits to the file, and the kept connections never write, so an unmoved version
        means an unchanged database (half the cost of the read, and none of its locking)."""
        driver = _driver(kept)
        if not self.memoised:
            return parse(driver.execute(prepared.sql, prepared.arguments(given)).fetchall()[0])
        version = driver.execute("PRAGMA data_version").fetchall()[0][0]
        memo: tuple[int, dict[tuple[Prepared, Hashable], Any]] | None = kept.info.get(MEMO)
        if memo is None or memo[0] != version:  # the version read before the rows: never too new
            memo = kept.info[MEMO] = (version, {})
        value: T | None = memo[1].get((prepared, key))
        if value is None:
            value = parse(driver.execute(prepared.sql, prepared.arguments(given)).fetchall()[0])
            if len(memo[1]) < MEMO_ROWS:
                memo[1][(prepared, key)] = value
        return value

    def _borrow(self) -> PoolProxiedConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        kept = self.engine.raw_connection()
        if self.postgresql:  # no transaction held between reads; a read never holds the loop long
            driver = _driver(kept)
            driver.autocommit = True
            driver.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        return kept

    def _give_back(self, kept: PoolProxiedConnection) -> None:
        with self._lock:
            if len(self._idle) < KEPT:
                self._idle.append(kept)
                return
        self._release(kept)

    def _release(self, connection: PoolProxiedConnection) -> None:
        """Back to the pool as the pool lends it: no statement timeout, not in autocommit, no rows
        kept (a connection that writes does not see its own commits in `data_version`)."""
        connection.info.pop(MEMO, None)
        if self.postgresql and connection.is_valid:
            driver = _driver(connection)
            driver.execute("RESET statement_timeout")
            driver.autocommit = False
        connection.close()


def _generations(row: Any) -> Generations:
    return Generations(int(row[0]), int(row[1]))


def _server_row(row: Any) -> tuple[Generations, ServerRow | None]:
    generations = Generations(int(row[0]), int(row[1]))
    if row[2] is None:
        return generations, None
    interval = None if row[7] is None else float(row[7])
    return generations, ServerRow(int(row[2]), int(row[3]), utc(row[4]), utc(row[5]), row[6], interval)


def _driver(connection: PoolProxiedConnection) -> DBAPIConnection:
    driver = connection.driver_connection
    assert driver is not None, "a connection the pool just lent"
    return driver  # type: ignore[no-any-return]
