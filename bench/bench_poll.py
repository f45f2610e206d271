"""Poll 200 local Streamable HTTP servers (50 tools each): `drift-monitor poll` against the bare SDK.

Goal (issue 3): the poller, storage included, within 1.25x of a bare loop of the SDK's own
`ClientSession.list_tools` over the same servers with the same concurrency, in the same run; and
under 64 database bytes added per unchanged poll, amortised.

The fleet is one separate process (`fleet_server.py`): 200 `MCPServer` Streamable HTTP apps,
each on its own 127.0.0.1 port, behind one uvicorn server. Both contenders poll the same fleet,
rounds alternate (SDK, ours, SDK, ours, ...), and the median round counts. The fleet's CPU use
is printed: if it is near one full core, the fleet is the bottleneck for both contenders alike
and the wall-clock ratio understates our overhead, so client CPU per poll is printed too.

    python bench/bench_poll.py [--profile]    (--profile: also cProfile one more round of ours,
                                               event loop and store writer thread apart)

Storage: the database grows by what 1,000 unchanged polls (5 rounds) add after the first round,
measured on the SQLite file after `PRAGMA wal_checkpoint(TRUNCATE)`, with the growth per table and
index (dbstat). With 200 servers that is 5 polls per server, below `attempts_kept`, so no attempt
row is trimmed yet; a second, store-only figure shows the steady state past `attempts_kept`.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import common  # noqa: F401  (the import path: the repository root and tests/)
import httpx2
import mcp_types as types
from mcp.client import ClientSession
from mcp.client.streamable_http import streamable_http_client
from support import Fleet, fleet, record_poll

from monitor.collect.poller import Job, Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store, make_engine, migrate
from monitor.store.registration import sync_servers

SERVERS = 200
TOOLS = 50
CONCURRENCY = 32
"""drift-monitor's default `poll_concurrency`; the SDK loop gets the same semaphore."""
ROUNDS = 4
"""Timed rounds per contender (alternating); with one untimed round of ours before them, ours make
the 5 x 200 = 1,000 unchanged polls whose database bytes count. Keeps the run under 3 minutes."""
BYTES_GOAL = 64.0
STEADY_SERVERS = 5
"""The steady-state storage check: this many servers, each polled past `attempts_kept`."""


@dataclass
class Round:
    wall: float
    client_cpu: float
    fleet_cpu: float


async def timed(work: Callable[[], Awaitable[None]], fleet_process: Fleet) -> Round:
    fleet_cpu, cpu, start = fleet_process.cpu_seconds(), time.process_time(), time.perf_counter()
    await work()
    wall = time.perf_counter() - start
    return Round(wall, time.process_time() - cpu, fleet_process.cpu_seconds() - fleet_cpu)


async def sdk_round(urls: list[str], concurrency: int) -> None:
    """The bare SDK: connect, initialize, list every page, close; same concurrency as ours."""
    gate = asyncio.Semaphore(concurrency)

    async def one(url: str) -> int:
        async with (
            gate,
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.list_tools()
            count = len(result.tools)
            while result.next_cursor is not None:
                params = types.PaginatedRequestParams(cursor=result.next_cursor)
                result = await session.list_tools(params=params)
                count += len(result.tools)
            return count

    counts = await asyncio.gather(*(one(url) for url in urls))
    if any(count != TOOLS for count in counts):
        raise RuntimeError(f"SDK loop saw tool counts {sorted(set(counts))}, expected {TOOLS}")


async def our_round(poller: Poller, jobs: list[Job], *, first: bool) -> None:
    outcomes = await poller.poll(jobs)
    failed = [o for o in outcomes if not o.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} polls failed, first: {failed[0].server}: {failed[0].error}")
    if any(o.tool_count != TOOLS for o in outcomes):
        raise RuntimeError("a poll saw the wrong number of tools")
    if not first and any(o.new_version for o in outcomes):
        raise RuntimeError("an unchanged poll created a new version")


@dataclass
class DbSize:
    bytes: int
    page_size: int
    pages: int
    free_pages: int
    objects: dict[str, int]
    """Bytes of pages in use per table and index, when SQLite has the dbstat table."""


def checkpoint_and_measure(store: Store, path: Path) -> DbSize:
    with store.engine.connect() as connection:
        busy, _, _ = connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
    if busy:
        raise RuntimeError("WAL checkpoint was blocked by a reader")
    with sqlite3.connect(path) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        try:
            objects = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
        except sqlite3.OperationalError:
            objects = {}
    return DbSize(path.stat().st_size, page_size, pages, free, objects)


def growth_lines(before: DbSize, after: DbSize, polls: int) -> list[str]:
    lines = [
        f"  pages {before.pages} -> {after.pages} of {after.page_size} B, "
        f"free pages {before.free_pages} -> {after.free_pages}"
    ]
    grown = sorted(
        ((after.objects.get(name, 0) - before.objects.get(name, 0), name) for name in after.objects),
        reverse=True,
    )
    for delta, name in grown:
        if delta:
            lines.append(f"  {name:<44} +{delta:>8} B  ({delta / polls:6.1f} B/poll)")
    return lines


def steady_state_bytes(tmp: Path) -> tuple[float, list[str]]:
    """Bytes per unchanged poll once every server is past `attempts_kept`, recorded straight into
    the store (the fleet would need 100+ rounds to get there); the same listing every time."""
    from fleet_server import make_tool

    path = tmp / "steady.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    settings = MonitorSettings()
    store = Store(engine, attempts_kept=settings.attempts_kept, unreachable_after=settings.unreachable_after)
    rng = random.Random(2)
    servers = [
        ServerConfig(name=f"steady-{i}", transport="http", url=f"http://127.0.0.1:9/{i}")
        for i in range(STEADY_SERVERS)
    ]
    ids = sync_servers(store, servers, datetime.now(UTC))
    listings = {
        ids[s.name]: CanonicalListing.of([make_tool(rng, i, t) for t in range(TOOLS)])
        for i, s in enumerate(servers)
    }
    clock = datetime.now(UTC)

    def polls(count: int) -> None:
        nonlocal clock
        for _ in range(count):
            for server_id, listing in listings.items():
                clock += timedelta(milliseconds=5)
                record_poll(
                    store,
                    server_id,
                    listing,
                    clock,
                    finished_at=clock + timedelta(milliseconds=40),
                    server_info={"name": "fleet", "version": "1.4.2"},
                    capabilities={"tools": {"listChanged": False}},
                )

    try:
        polls(settings.attempts_kept + 10)
        before = checkpoint_and_measure(store, path)
        polls(1000 // STEADY_SERVERS)
        after = checkpoint_and_measure(store, path)
    finally:
        engine.dispose()
    per_poll = (after.bytes - before.bytes) / 1000
    return per_poll, growth_lines(before, after, 1000)


def ssl_context_ms() -> float:
    """CPU milliseconds to build the SSL context (CA bundle load) every new httpx client builds."""
    samples = []
    for _ in range(5):
        start = time.process_time()
        httpx2.create_ssl_context()
        samples.append(time.process_time() - start)
    return statistics.median(samples) * 1000


async def profile_round(poller: Poller, jobs: list[Job]) -> None:
    """cProfile one round of ours: the event loop thread and the store's writer thread apart."""
    loop_profile, writer_profile = cProfile.Profile(), cProfile.Profile()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(poller.writer, writer_profile.enable)
    loop_profile.enable()
    await our_round(poller, jobs, first=False)
    loop_profile.disable()
    await loop.run_in_executor(poller.writer, writer_profile.disable)
    for title, profile in (("event loop thread", loop_profile), ("store writer thread", writer_profile)):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
        print(f"--- profile: {title} ---")
        print(out.getvalue())


async def run(fleet_process: Fleet, tmp: Path, profile: bool) -> list[tuple[str, float, float, str]]:
    urls = fleet_process.urls
    n = len(urls)
    path = tmp / "bench.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    settings = MonitorSettings(poll_concurrency=CONCURRENCY)
    concurrency = settings.poll_concurrency  # a DRIFT_MONITOR_POLL_CONCURRENCY override applies to both
    servers = [ServerConfig(name=f"fleet-{i:03d}", transport="http", url=url) for i, url in enumerate(urls)]
    config = Config(monitor=settings, servers=servers, source="(bench)")
    store = Store(engine, attempts_kept=settings.attempts_kept, unreachable_after=settings.unreachable_after)
    poller = Poller(store, config)
    try:
        jobs = poller.jobs()
        warm_sdk = await timed(lambda: sdk_round(urls[:concurrency], concurrency), fleet_process)
        warm_ours = await timed(lambda: our_round(poller, jobs, first=True), fleet_process)
        print(
            f"warm-up: SDK {warm_sdk.wall:.2f} s ({concurrency} servers), ours {warm_ours.wall:.2f} s "
            f"(all {n}: first snapshots, {n * TOOLS} tool definitions stored)"
        )
        before = checkpoint_and_measure(store, path)
        # The 1,000 unchanged polls of the bytes figure: one untimed round, then the timed ones.
        await our_round(poller, jobs, first=False)
        sdk: list[Round] = []
        ours: list[Round] = []
        for _ in range(ROUNDS):
            sdk.append(await timed(lambda: sdk_round(urls, concurrency), fleet_process))
            ours.append(await timed(lambda: our_round(poller, jobs, first=False), fleet_process))
        after = checkpoint_and_measure(store, path)
        if profile:
            await profile_round(poller, jobs)
    finally:
        poller.close()
        engine.dispose()

    def median(rounds: list[Round], pick: Callable[[Round], float]) -> float:
        return statistics.median(pick(r) for r in rounds)

    sdk_wall, ours_wall = median(sdk, lambda r: r.wall), median(ours, lambda r: r.wall)
    sdk_cpu, ours_cpu = median(sdk, lambda r: r.client_cpu), median(ours, lambda r: r.client_cpu)
    sdk_fleet, ours_fleet = median(sdk, lambda r: r.fleet_cpu), median(ours, lambda r: r.fleet_cpu)
    polls = (ROUNDS + 1) * n
    per_poll = (after.bytes - before.bytes) / polls
    print(f"fleet: {n} Streamable HTTP servers x {TOOLS} tools in one process; concurrency {concurrency}")
    print(f"rounds: {ROUNDS} per contender, alternating; medians (all rounds: see below)")
    print(f"bare SDK list_tools loop: {n / sdk_wall:7.1f} polls/s  ({sdk_wall * 1000 / n:5.2f} ms/poll)")
    print(f"drift-monitor poll:       {n / ours_wall:7.1f} polls/s  ({ours_wall * 1000 / n:5.2f} ms/poll)")
    print(f"time ratio ours/SDK: {ours_wall / sdk_wall:.2f}x  (goal <= 1.25x, storage included)")
    print(
        f"client CPU per poll: SDK {sdk_cpu * 1000 / n:.2f} ms, ours {ours_cpu * 1000 / n:.2f} ms "
        f"({ours_cpu / sdk_cpu:.2f}x); the client process is one core at most (GIL)"
    )
    print(
        f"  of which {ssl_context_ms():.1f} ms is the SSL context (CA bundle load) a new httpx client "
        "builds, even for http:// URLs: both contenders make one client per poll"
    )
    print(
        f"fleet CPU: {sdk_fleet / sdk_wall:.0%} of a core in SDK rounds, {ours_fleet / ours_wall:.0%} in ours"
        " (near 100% would mean the fleet bounds both contenders alike)"
    )
    print("  SDK walls:  " + " ".join(f"{r.wall:.2f}" for r in sdk))
    print("  ours walls: " + " ".join(f"{r.wall:.2f}" for r in ours))
    print(
        f"database after first round {before.bytes} B, after {polls} more unchanged polls {after.bytes} B: "
        f"{per_poll:.1f} B/poll (goal < {BYTES_GOAL:g})"
    )
    for line in growth_lines(before, after, polls):
        print(line)
    steady_start = time.perf_counter()
    steady, steady_lines = steady_state_bytes(tmp)
    print(
        f"steady state ({STEADY_SERVERS} servers already past attempts_kept={settings.attempts_kept}, "
        f"1,000 more unchanged polls recorded straight into the store, "
        f"{time.perf_counter() - steady_start:.1f} s): {steady:.1f} B/poll"
    )
    for line in steady_lines:
        print(line)
    goal = "ratio>=0.80 (<=1.25x time)"
    return [
        ("poll 200 servers, ms/poll vs bare SDK", ours_wall * 1000 / n, sdk_wall * 1000 / n, goal),
        ("client CPU ms/poll vs bare SDK", ours_cpu * 1000 / n, sdk_cpu * 1000 / n, "(explains the above)"),
        ("DB B/unchanged poll, 1,000 (base=budget)", per_poll, BYTES_GOAL, "<64 B: ratio>1"),
        ("DB B/unchanged poll, steady (base=budget)", steady, BYTES_GOAL, "<64 B: ratio>1"),
    ]


def main(profile: bool = False) -> list[tuple[str, float, float, str]]:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-poll-") as tmp, fleet(SERVERS, TOOLS) as fleet_process:
        ready = time.perf_counter() - start
        print(f"fleet of {SERVERS} servers in one process ready in {ready:.1f} s (pid {fleet_process.pid})")
        rows = asyncio.run(run(fleet_process, Path(tmp), profile))
    print(f"benchmark wall time {time.perf_counter() - start:.1f} s")
    return rows


if __name__ == "__main__":
    for figure, ours, baseline, goal in main(profile="--profile" in sys.argv[1:]):
        print(
            f"{figure}: ours {ours:.2f}, baseline {baseline:.2f}, ratio {baseline / ours:.2f}x, goal {goal}"
        )
