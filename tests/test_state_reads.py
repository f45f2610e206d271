"""The per-decision reads (`monitor.store.statereads`) see every commit, from any connection, at once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from monitor.config import ServerConfig
from monitor.store import Store
from monitor.store.models import Server
from monitor.store.registration import sync_servers
from monitor.store.statereads import MEMO

SERVER = ServerConfig(name="demo", transport="http", url="http://127.0.0.1:9/", interval=60)


def set_interval(store: Store, seconds: float) -> None:
    with Session(store.engine) as session, session.begin():
        session.execute(update(Server).where(Server.name == "demo").values(interval_seconds=seconds))


def read_interval(store: Store) -> float | None:
    _, row = store.reads.server("demo")
    assert row is not None
    return row.interval_seconds


def test_each_read_sees_the_last_commit_of_any_other_connection(store: Store) -> None:
    sync_servers(store, [SERVER], datetime.now(UTC))
    for seconds in (61.0, 62.0, 62.0, 63.0):
        set_interval(store, seconds)
        assert read_interval(store) == seconds
        assert read_interval(store) == seconds  # read again: the same, whether kept or read anew
    seen: list[float | None] = []  # on another thread, on whichever kept connection it gets
    reader = threading.Thread(target=lambda: seen.append(read_interval(store)))
    reader.start()
    reader.join()
    assert seen == [63.0]
    _, missing = store.reads.server("nobody")
    assert missing is None
    sync_servers(store, [SERVER, SERVER.model_copy(update={"name": "nobody"})], datetime.now(UTC))
    _, added = store.reads.server("nobody")
    assert added is not None


def test_a_connection_goes_back_to_the_pool_without_the_rows_it_kept(store: Store) -> None:
    """A pooled connection may write next, and its own commits do not move its `data_version`."""
    sync_servers(store, [SERVER], datetime.now(UTC))
    set_interval(store, 60.0)
    assert read_interval(store) == 60.0
    store.reads.close()
    pooled = store.engine.raw_connection()
    try:
        assert MEMO not in pooled.info
    finally:
        pooled.close()
    set_interval(store, 70.0)
    assert read_interval(store) == 70.0
