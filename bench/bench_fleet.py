"""One fleet, one PostgreSQL, one `serve` and then two: what the database does per poll, and how
many polls a second one instance and two instances do in the same run.

1. Statements per poll. One instance's `Scheduler`, `Poller` and `Store` as `serve` builds them, in
   this process, on a fresh schema, against the raw fleet (bench/raw_fleet.py, 50 tools per
   server). SQLAlchemy's cursor events count every statement (by verb, with the rows it touched),
   its commit events the transactions, and the pool's checkouts the pre-ping each checkout sends
   (`SELECT 1`, which the cursor events do not see); the WAL the database wrote is the difference of
   `pg_current_wal_insert_lsn()` around each phase (the whole server's: other work on it counts too,
   so it is an upper bound), and the CPU time of the database's server processes that serve this
   engine's connections (the database runs on this machine; /proc). Phases, each measured on its
   own: claiming (per server claimed, in one claim of 64 and in claims of 1), unchanged polls (64
   at once, so they share group commits, and one at a time), changed polls (a server polled at
   another server's URL: another listing), and failures (a closed port; the first failure of a
   healthy server and later ones apart).
2. Throughput. The raw fleet, more servers due than one instance can poll (so each instance runs
   flat out), polled by one `drift-monitor serve`, then by two on the same database; polls a
   second counted from the database (successful polls: the growth of the versions' `poll_count`;
   failures: `poll_attempts`), over a window that starts once every instance has polled every
   server (its kept client and connection, and the listing's digest, are there). CPU per poll and
   the database connections each instance holds from /proc.

    DRIFT_MONITOR_TEST_PG_URL=postgresql+psycopg://... python bench/bench_fleet.py \
        [--servers 600] [--interval 5] [--window 60] [--concurrency 64] [--only-statements]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
from sqlalchemy import Engine, create_engine, event, text, update
from support import Service, migrate_config, postgres_schema, wait_until
from support.claims import claims, install_claim_log
from support.fleet import raw_fleet

PG_ENV = "DRIFT_MONITOR_TEST_PG_URL"
TOOLS = 50
MEASURED = 64
"""Servers of the statement count: one claim's worth at the default `poll_concurrency`."""
ROUNDS = 3
"""Rounds of the statement count's phases. The WAL and the database's CPU shown are a phase's least
over them: other work on the machine and the database only adds to them. A phase whose counts
differed between rounds is marked with a *."""


# -- 1. statements per poll --------------------------------------------------------------------------


class Tally:
    """Statements, rows, transactions and pool checkouts on one engine, from its events."""

    def __init__(self, engine: Engine) -> None:
        self.lock = threading.Lock()
        self.statements: Counter[str] = Counter()
        self.rows: Counter[str] = Counter()
        self.commits = 0
        self.checkouts = 0
        self.backends: set[int] = set()
        """The server processes of the engine's connections (the database runs on this machine)."""
        self.backend_cpu = 0.0
        with engine.connect() as connection:  # the pool's connections from now on are counted too
            self.backends.add(int(connection.execute(text("select pg_backend_pid()")).scalar_one()))
        event.listen(engine, "connect", self._connected)
        event.listen(engine, "after_cursor_execute", self._executed)
        event.listen(engine, "commit", self._committed)
        event.listen(engine.pool, "checkout", self._checked_out)

    def _executed(self, _conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        if verb == "SELECT" and "FOR UPDATE" in statement:
            verb = "SELECT FOR UPDATE"
        if verb == "INSERT" and "ON CONFLICT" in statement:
            verb = "UPSERT"
        with self.lock:
            self.statements[verb] += 1
            self.rows[verb] += max(cursor.rowcount, 0)

    def _connected(self, dbapi_connection: Any, _record: Any) -> None:
        with self.lock:
            self.backends.add(int(dbapi_connection.info.backend_pid))

    def backend_seconds(self) -> float:
        """CPU seconds the engine's server processes have used so far."""
        with self.lock:
            backends = list(self.backends)
        total = 0.0
        for pid in backends:
            with contextlib.suppress(OSError):
                total += common.cpu_seconds(pid)
        return total

    def _committed(self, *_: Any) -> None:
        with self.lock:
            self.commits += 1

    def _checked_out(self, *_: Any) -> None:
        with self.lock:
            self.checkouts += 1

    def reset(self) -> None:
        with self.lock:
            self.statements.clear()
            self.rows.clear()
            self.commits = self.checkouts = 0


def wal_lsn(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(text("select pg_current_wal_insert_lsn() - '0/0'::pg_lsn")).scalar_one()
        )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def statement_phases(database_url: str, urls: list[str]) -> dict[str, list[tuple[int, Tally, int]]]:
    from monitor.collect.poller import Job, Poller
    from monitor.collect.scheduler import LeaseRelease, Scheduler, instance_id
    from monitor.collect.targets import limits_for
    from monitor.config import Config, MonitorSettings, ServerConfig
    from monitor.notify.alerts import alerting_store
    from monitor.store import make_engine, migrate
    from monitor.store.models import Server

    logging.getLogger("drift_monitor").setLevel(logging.CRITICAL)  # the failures measured, one line each
    dead = f"http://127.0.0.1:{closed_port()}/mcp"
    servers = [ServerConfig(name=f"s{i:03d}", transport="http", url=url) for i, url in enumerate(urls)]
    servers += [ServerConfig(name=f"dead{i:02d}", transport="http", url=dead) for i in range(MEASURED)]
    config = Config(
        monitor=MonitorSettings(database_url=database_url, poll_interval=60, poll_timeout=10), servers=servers
    )
    engine = make_engine(database_url)
    migrate(engine)
    owner = instance_id()
    store, _ = alerting_store(engine, config, hooks=[LeaseRelease(owner)])
    poller = Poller(store, config)
    scheduler = Scheduler(store, poller, config, owner)
    scheduler.register(datetime.now(UTC))
    limits = limits_for(config.monitor)
    ids = sorted(scheduler.targets)
    healthy = [i for i in ids if scheduler.targets[i].name.startswith("s")]
    failing = [i for i in ids if i not in healthy]

    def due(server_ids: list[int]) -> None:
        with store.sessions.begin() as session:
            past = datetime.now(UTC) - timedelta(seconds=1)
            session.execute(
                update(Server)
                .where(Server.id.in_(server_ids))
                .values(next_poll_at=past, lease_owner=None, lease_expires_at=None)
            )

    async def polls(pairs: list[tuple[int, int]], together: bool) -> None:
        """Poll server a at server b's target, all at once (`together`) or one after the other."""
        jobs = [Job(a, scheduler.targets[b], limits) for a, b in pairs]
        if together:
            await asyncio.gather(*(poller.poll_one(job) for job in jobs))
        else:
            for job in jobs:
                await poller.poll_one(job)

    await polls([(i, i) for i in ids], together=True)  # first versions (and first failures) off the record
    await polls([(i, i) for i in ids], together=True)
    tally = Tally(engine)
    results: dict[str, list[tuple[int, Tally, int]]] = {}

    async def phase(name: str, count: int, work: Any) -> None:
        lsn = await asyncio.to_thread(wal_lsn, engine)
        tally.reset()
        cpu = tally.backend_seconds()
        await work()
        snapshot = Tally.__new__(Tally)
        snapshot.statements, snapshot.rows = Counter(tally.statements), Counter(tally.rows)
        snapshot.commits, snapshot.checkouts = tally.commits, tally.checkouts
        snapshot.backend_cpu = tally.backend_seconds() - cpu
        wal = await asyncio.to_thread(wal_lsn, engine) - lsn
        results.setdefault(name, []).append((count, snapshot, wal))

    async def claim_together() -> None:
        await asyncio.to_thread(scheduler.claim, datetime.now(UTC), MEASURED)

    async def claim_alone() -> None:
        for _ in range(MEASURED):
            await asyncio.to_thread(scheduler.claim, datetime.now(UTC), 1)

    unchanged = [(i, i) for i in healthy]
    swapped = [(a, b) for a, b in zip(healthy, healthy[1:] + healthy[:1], strict=True)]
    fresh = [(i, i) for i in failing]
    broken = [(a, failing[0]) for a in healthy]
    for _ in range(ROUNDS):
        await asyncio.to_thread(due, healthy)
        await phase(f"claim, {MEASURED} in one claim", MEASURED, claim_together)
        await asyncio.to_thread(due, healthy)
        await phase("claim, one server per claim", MEASURED, claim_alone)
        await phase(f"unchanged listing, {MEASURED} at once", MEASURED, lambda: polls(unchanged, True))
        await phase("unchanged listing, one at a time", MEASURED, lambda: polls(unchanged, False))
        await phase("changed listing, one at a time", MEASURED, lambda: polls(swapped, False))
        await phase(
            "changed back to the listing before, one at a time", MEASURED, lambda: polls(unchanged, False)
        )
        await polls(fresh, True)  # the third failure opens `server-unreachable`: measured below apart
        await phase("failure (server was failing), one at a time", MEASURED, lambda: polls(fresh, False))
        await polls(unchanged, True)
        await phase("failure (server was answering), one at a time", MEASURED, lambda: polls(broken, False))
        await polls(unchanged, True)  # answering again: the next round starts where this one did
    poller.close()
    engine.dispose()
    return results


def print_phases(results: dict[str, list[tuple[int, Tally, int]]]) -> None:
    print(f"per poll (per server claimed for the claims), on PostgreSQL; first of {ROUNDS} rounds but WAL:")
    print(
        f"{'phase':<50} {'stmts':>6} {'commits':>8} {'pings':>6} {'WAL kB':>7} {'PG ms':>6}  "
        "statements (rows) by verb"
    )
    for name, rounds in results.items():
        count, tally, _ = rounds[0]
        wal = min(w for _, _, w in rounds)
        backend_ms = 1000 * min(t.backend_cpu for _, t, _ in rounds) / count
        if any(t.statements != tally.statements or t.rows != tally.rows for _, t, _ in rounds):
            name += " *"
        verbs = ", ".join(
            f"{verb} {n / count:.2f} ({tally.rows[verb] / count:.2f})"
            for verb, n in sorted(tally.statements.items())
        )
        print(
            f"{name:<50} {sum(tally.statements.values()) / count:>6.2f} {tally.commits / count:>8.2f} "
            f"{tally.checkouts / count:>6.2f} {wal / count / 1024:>7.2f} {backend_ms:>6.2f}  {verbs}"
        )


# -- 2. one instance, then two -----------------------------------------------------------------------


def write_config(path: Path, database_url: str, args: argparse.Namespace, urls: list[str]) -> Path:
    path.write_text(
        f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{args.interval:g}s"\n'
        f'poll_timeout = "10s"\npoll_concurrency = {args.concurrency}\n\n'
        + "".join(
            f'[[servers]]\nname = "s{i:04d}"\ntransport = "http"\nurl = "{url}"\n\n'
            for i, url in enumerate(urls)
        )
    )
    return path


def database_connections(pid: int, port: int) -> int:
    """How many TCP connections process `pid` holds to the database's `port` (from /proc)."""
    sockets = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":  # ESTABLISHED
                sockets.add(f"socket:[{fields[9]}]")
    held = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            held += os.readlink(fd) in sockets
    return held


def polls_so_far(engine: Engine) -> int:
    with engine.connect() as connection:
        ok = connection.execute(text("select coalesce(sum(poll_count), 0) from snapshots")).scalar_one()
        failed = connection.execute(text("select count(*) from poll_attempts where not ok")).scalar_one()
    return int(ok) + int(failed)


@contextlib.contextmanager
def instances(config: Path, env: dict[str, str], count: int) -> Iterator[list[Service]]:
    with contextlib.ExitStack() as stack:
        started = [Service(config, env) for _ in range(count)]
        for instance in started:
            stack.enter_context(instance)
        for instance in started:
            instance.wait_ready()
        yield started
        codes = [instance.stop() for instance in started]
        assert codes == [0] * count, [instance.tail() for instance in started]


def throughput(
    engine: Engine, config: Path, env: dict[str, str], count: int, args: argparse.Namespace
) -> dict[str, Any]:
    first_claim = max((claim.id for claim in claims(engine)), default=0)
    with instances(config, env, count) as running:

        def every_server_polled() -> bool:
            """Every instance has polled every server: its kept client and connection, and the
            listing's digest, are there, as in a long run."""
            pairs = {(c.pid, c.server) for c in claims(engine) if c.id > first_claim}
            seen = Counter(pid for pid, _ in pairs)
            return all(seen[instance.pid] >= args.servers for instance in running)

        wait_until(
            f"every server claimed by each of {count} instance(s)",
            every_server_polled,
            timeout=900,
            alive=running,
        )
        time.sleep(args.interval)  # the claims above are polled and recorded
        polls0, cpu0, busy0 = (
            polls_so_far(engine),
            [common.cpu_seconds(i.pid) for i in running],
            common.machine_busy(),
        )
        claim0 = max(c.id for c in claims(engine))
        began = time.monotonic()
        time.sleep(args.window)
        polls1, cpu1, busy1 = (
            polls_so_far(engine),
            [common.cpu_seconds(i.pid) for i in running],
            common.machine_busy(),
        )
        wall = time.monotonic() - began
        by_owner = Counter(c.pid for c in claims(engine) if c.id > claim0)
        port = engine.url.port or 5432
        connections = [database_connections(i.pid, port) for i in running]
    polls = polls1 - polls0
    cpu = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    busy = [b - a for a, b in zip(busy0, busy1, strict=True)]
    return {
        "instances": count,
        "polls_per_s": polls / wall,
        "cpu_ms": 1000 * sum(cpu) / max(polls, 1),
        "cores": [c / wall for c in cpu],
        "claims": [by_owner[i.pid] for i in running],
        "connections": connections,
        "machine_busy": busy[0] / busy[1],
    }


def run(base_url: str, args: argparse.Namespace) -> list[tuple[str, float, float, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_MONITOR_")}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-fleet-")))
        fleet = stack.enter_context(raw_fleet(args.servers, TOOLS))
        if not args.skip_statements:
            url = stack.enter_context(postgres_schema(base_url, "bench"))
            print_phases(asyncio.run(statement_phases(url, fleet.urls[:MEASURED])))
            if args.only_statements:
                return []
        url = stack.enter_context(postgres_schema(base_url, "bench"))
        config = write_config(tmp / "monitor.toml", url, args, fleet.urls)
        migrate_config(config, env)
        engine = create_engine(url)
        stack.callback(engine.dispose)
        install_claim_log(engine)
        demand = args.servers / args.interval
        print(
            f"\n{args.servers} servers every {args.interval:g} s ({demand:.0f} polls/s due), "
            f"{TOOLS} tools each, concurrency {args.concurrency} per instance, "
            f"{args.window:g} s windows, {os.cpu_count()} cores:"
        )
        rows = [throughput(engine, config, env, count, args) for count in (1, 2)]
    for row in rows:
        print(
            f"  {row['instances']} instance(s): {row['polls_per_s']:.1f} polls/s, "
            f"{row['cpu_ms']:.2f} ms CPU per poll, "
            f"cores used {' + '.join(f'{c:.2f}' for c in row['cores'])}, claims {row['claims']}, "
            f"database connections {row['connections']}, "
            f"machine {row['machine_busy']:.0%} busy"
        )
    one, two = rows[0]["polls_per_s"], rows[1]["polls_per_s"]
    return [("fleet PG: wall ms per poll, 2 instances (base=1)", 1000 / two, 1000 / one, "2x: two add up")]


def main(argv: list[str] | None = None) -> list[tuple[str, float, float, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=600)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--skip-statements", action="store_true")
    parser.add_argument("--only-statements", action="store_true")
    args = parser.parse_args(argv or [])  # bench/run.py runs it with the defaults
    pg_url = os.environ.get(PG_ENV)
    if not pg_url:
        print(f"skipped: several instances share a fleet only on PostgreSQL ({PG_ENV} is not set)")
        return []
    return run(pg_url, args)


if __name__ == "__main__":
    for figure, ours, baseline, goal in main(sys.argv[1:]):
        print(
            f"{figure}: ours {ours:.2f}, baseline {baseline:.2f}, ratio {baseline / ours:.2f}x, goal {goal}"
        )
