"""The per-decision reads (`monitor.store.statereads`) see every commit, from any connection, at once;
the decision cache builds a view once however many calls need it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from monitor.approvals import cache
from monitor.approvals.cache import DecisionView, ServerView
from monitor.config import ServerConfig
from monitor.store import Store
from monitor.store.models import Server
from monitor.store.registration import sync_servers
from monitor.store.statereads import MEMO, StateReads

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


def test_calls_about_a_server_whose_view_is_being_built_wait_for_that_one_build(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst right after a poll moved a server's version would otherwise build its view once per call."""
    sync_servers(store, [SERVER], datetime.now(UTC))
    view = DecisionView(store.engine, store.reads)
    callers = 8
    read, built = threading.Semaphore(0), []
    reads_server, load = StateReads.server, cache.load_server_view

    def counted_read(self: StateReads, name: str, session: Session | None = None) -> Any:
        found = reads_server(self, name, session)
        read.release()
        return found

    def held_build(session: Session, server: Server) -> ServerView:
        for _ in range(callers):  # every caller has read the server's row: all of them need a view
            assert read.acquire(timeout=30)
        built.append(server.name)
        return load(session, server)

    monkeypatch.setattr(StateReads, "server", counted_read)
    monkeypatch.setattr(cache, "load_server_view", held_build)
    with ThreadPoolExecutor(callers) as pool:
        lookups = list(pool.map(lambda _: view.server("demo"), range(callers)))
    assert built == ["demo"]
    assert all(lookup.view is lookups[0].view is not None for lookup in lookups)
