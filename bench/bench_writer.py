"""The store writer's CPU per unchanged poll: group commit against a poll's own transaction.

    python bench/bench_writer.py [--servers 1000] [--rounds 3]

`serve`'s writer thread records unchanged polls in batches (`monitor.store.batch`); on a fleet
polled at ~17 polls/s a batch often holds one poll, so its per-batch cost counts as much as its
per-poll cost. This records every server's unchanged poll round after round on SQLite through the
store `serve` builds (lease release and alerting hooks, a client view per server), in batches of
1 and of 50, and, as the baseline in the same run, each poll in a transaction of its own
(`Store.record`, the path before group commit). CPU is the recording thread's own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common  # noqa: F401  (the import path: the repository root and tests/)
from support.polls import fetched_poll

from monitor.collect.scheduler import LeaseRelease
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.clients import DEFAULT_PROFILE
from monitor.core.fingerprint import CanonicalListing
from monitor.notify.alerts import alerting_store
from monitor.store import Store, make_engine, migrate
from monitor.store.batch import record_unchanged
from monitor.store.polled import SuccessfulPoll
from monitor.store.registration import sync_servers

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LISTING = CanonicalListing.of(
    [
        {
            "name": f"tool{i}",
            "description": f"Tool number {i}.",
            "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}},
        }
        for i in range(50)
    ]
)


def poll(server_id: int, at: datetime) -> SuccessfulPoll:
    return fetched_poll(server_id, LISTING, at, client=DEFAULT_PROFILE)


def filled(directory: str, servers: int) -> tuple[Store, list[int]]:
    engine = make_engine(f"sqlite:///{Path(directory) / 'bench.db'}")
    migrate(engine)
    store, _ = alerting_store(engine, Config(monitor=MonitorSettings(), servers=[], source="bench"))
    store.hooks.insert(0, LeaseRelease("bench"))
    configs = [
        ServerConfig(name=f"s{i:05d}", transport="http", url=f"http://127.0.0.1:9/{i}")
        for i in range(servers)
    ]
    ids = list(sync_servers(store, configs, T0).values())
    for server_id in ids:
        store.record(poll(server_id, T0))
    return store, ids


def cpu_per_poll(
    ids: list[int], rounds: int, first: int, record: Callable[[list[int], datetime], Any]
) -> float:
    """Thread CPU ms per poll over `rounds` rounds of every server, after one round to warm up."""
    record(ids, T0 + timedelta(minutes=first))
    start = time.thread_time()
    for round_ in range(1, rounds + 1):
        record(ids, T0 + timedelta(minutes=first + round_))
    return 1000 * (time.thread_time() - start) / (rounds * len(ids))


def batches(store: Store, size: int) -> Callable[[list[int], datetime], None]:
    def record(ids: list[int], at: datetime) -> None:
        for start in range(0, len(ids), size):
            assert all(record_unchanged(store, [poll(sid, at) for sid in ids[start : start + size]]))

    return record


def alone(store: Store) -> Callable[[list[int], datetime], None]:
    def record(ids: list[int], at: datetime) -> None:
        for server_id in ids:
            store.record(poll(server_id, at))

    return record


def main(argv: list[str] | None = None) -> list[tuple[str, float, float, str]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv or [])
    with tempfile.TemporaryDirectory() as directory:
        store, ids = filled(directory, args.servers)
        try:
            own = cpu_per_poll(ids, args.rounds, 1, alone(store))
            one = cpu_per_poll(ids, args.rounds, 10, batches(store, 1))
            fifty = cpu_per_poll(ids, args.rounds, 20, batches(store, 50))
        finally:
            store.engine.dispose()
    print(f"{args.servers} servers on SQLite, writer CPU ms per unchanged poll:")
    print(f"  own transaction (baseline) {own:.2f}; batches of 1: {one:.2f}; batches of 50: {fifty:.2f}")
    return [
        ("writer ms/unchanged poll, batch of 1", one, own, "under the own transaction's"),
        ("writer ms/unchanged poll, batch of 50", fifty, own, "a fraction of it"),
    ]


if __name__ == "__main__":
    main(sys.argv[1:])
