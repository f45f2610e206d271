"""How many servers one instance keeps on a 60 s interval: the scheduler, poller and store of `serve`
against a plain pooled HTTP client on the same fleet, in the same run.

    python bench/bench_throughput.py [--sizes 1000,5000,10000] [--interval 60] [--duration 120]
                                     [--concurrency 64] [--rss-every 10]

For each size, a raw JSON-RPC fleet (`raw_fleet.py`, split over processes of 2,500 servers, each on
its own 127.0.0.1 port) serves 50 tools per server, and two contenders run one after the other,
each in its own process so CPU and RSS are its own:

- raw: one kept httpx client per server doing initialize, notifications/initialized, tools/list
  and DELETE, each server at a random slot in the first interval and every interval after, at
  most `--concurrency` polls at a time: the floor any Python poller pays here;
- drift-monitor: `Scheduler` + `Poller` + `Store` as `serve` runs them (claims and leases in the
  database, the SDK's client on kept HTTP clients, unchanged polls group-committed to SQLite,
  the alerting hook), `poll_concurrency` = `--concurrency`. No web server or watch sessions.

Reported for each: servers polled in the first window (of how many; on time, i.e. within 10% of
the interval after their first slot), polls/s, poll lag (when a poll started after its slot,
p50/p99), CPU ms per poll (the event loop thread, and the store writer and claim threads apart),
RSS at the end of the first window and at the end, failed polls; then the ratio of our CPU per
poll to the raw client's. A size is *kept* when 99% of the servers were polled on time in the
first window and p99 lag stays under 10% of the interval. The machine is shared: read the
figures against the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import heapq
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
import httpx2

PER_FLEET_PROCESS = 2500
TOOLS = 50
BENCH = Path(__file__).resolve().parent


# -- measuring a process and its threads ---------------------------------------------------------


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native thread id."""
    times: dict[int, float] = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            times[int(task.name)] = (int(fields[11]) + int(fields[12])) / common.TICKS_PER_SECOND
    return times


class RssSampler:
    """RSS every `every` seconds on a thread, so a busy event loop cannot skip samples."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self.began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append((time.monotonic() - self.began, common.rss_mb()))

    def at(self, seconds: float) -> float:
        """The last sample taken by `seconds` into the run."""
        before = [rss for at, rss in self.samples if at <= seconds]
        return before[-1] if before else common.rss_mb()


def summary(
    name: str,
    servers: int,
    interval: float,
    slots: dict[int, datetime],
    starts: dict[int, list[datetime]],
    began: datetime,
    duration: float,
    cpu_loop: float,
    cpu_store: float,
    rss: RssSampler,
    failed: int,
) -> dict[str, Any]:
    """The figures of one contender from each server's first slot and its polls' start times."""
    step = timedelta(seconds=interval)
    end = began + timedelta(seconds=duration)
    lags: list[float] = []
    polls = 0
    for server, times in starts.items():
        inside = sorted(t for t in times if began <= t < end)
        polls += len(inside)
        for k, at in enumerate(inside):
            lags.append((at - (slots[server] + k * step)).total_seconds())
    allowed = timedelta(seconds=LAG_ALLOWED * interval)
    first = sum(
        1 for server, times in starts.items() if any(began <= t <= slots[server] + allowed for t in times)
    )
    return {
        "name": name,
        "servers": servers,
        "first_window": first,
        "polls": polls,
        "polls_per_s": polls / duration,
        "lag_p50": common.quantile(lags, 0.5),
        "lag_p99": common.quantile(lags, 0.99),
        "cpu_loop_ms": 1000 * cpu_loop / max(polls, 1),
        "cpu_store_ms": 1000 * cpu_store / max(polls, 1),
        "rss_first_mb": rss.at(interval),
        "rss_end_mb": rss.samples[-1][1] if rss.samples else common.rss_mb(),
        "rss_samples": [round(mb) for _, mb in rss.samples],
        "failed": failed,
    }


# -- the raw client ------------------------------------------------------------------------------


async def raw_contender(
    urls: list[str], interval: float, duration: float, concurrency: int
) -> dict[str, Any]:
    rng = random.Random(7)
    limits = httpx2.Limits(max_connections=4, max_keepalive_connections=1, keepalive_expiry=interval + 30)
    tls = httpx2.create_ssl_context()  # one per process, as ours: building one costs ~40 ms
    clients = [httpx2.AsyncClient(limits=limits, timeout=30, verify=tls) for _ in urls]
    began = datetime.now(UTC)
    clock0 = time.monotonic()
    slots = {i: began + timedelta(seconds=rng.uniform(0, interval)) for i in range(len(urls))}
    queue = [(rng_slot, i) for i, rng_slot in slots.items()]
    heapq.heapify(queue)
    gate = asyncio.Semaphore(concurrency)
    starts: dict[int, list[datetime]] = {i: [] for i in range(len(urls))}
    failed = 0
    tasks: set[asyncio.Task[None]] = set()

    async def poll(i: int) -> None:
        nonlocal failed
        try:
            starts[i].append(datetime.now(UTC))
            client, url = clients[i], urls[i]
            base = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
            try:
                init = await client.post(
                    url,
                    headers=base,
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": "raw", "version": "1"},
                        },
                    },
                )
                version = init.json()["result"]["protocolVersion"]
                headers = {
                    **base,
                    "mcp-session-id": init.headers["mcp-session-id"],
                    "mcp-protocol-version": version,
                }
                await client.post(
                    url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
                )
                listed = await client.post(
                    url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                )
                if not listed.json()["result"]["tools"]:
                    raise ValueError("no tools")
                await client.delete(url, headers=headers)
            except Exception:
                failed += 1
        finally:
            gate.release()

    cpu0 = thread_cpu()
    with RssSampler(RSS_EVERY) as rss:
        while queue and time.monotonic() - clock0 < duration:
            due, i = queue[0]
            wait = (due - datetime.now(UTC)).total_seconds()
            if wait > 0:
                await asyncio.sleep(min(wait, 0.05))
                continue
            await gate.acquire()  # as the scheduler claims: only as many as the concurrency frees
            heapq.heapreplace(queue, (due + timedelta(seconds=interval), i))
            task = asyncio.create_task(poll(i))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        cpu = sum(thread_cpu().values()) - sum(cpu0.values())
        await asyncio.gather(*tasks)
    await asyncio.gather(*(c.aclose() for c in clients))
    return summary("raw client", len(urls), interval, slots, starts, began, duration, cpu, 0.0, rss, failed)


# -- drift-monitor ---------------------------------------------------------------------------------


async def monitor_contender(
    urls: list[str], interval: float, duration: float, concurrency: int, workdir: Path
) -> dict[str, Any]:
    from sqlalchemy import select

    from monitor.collect.poller import Poller
    from monitor.collect.scheduler import LeaseRelease, Scheduler, instance_id
    from monitor.config import Config, MonitorSettings, ServerConfig
    from monitor.notify.alerts import alerting_store
    from monitor.service.runtime import long_running_heap
    from monitor.store import make_engine, migrate
    from monitor.store.marks import from_epoch_ms
    from monitor.store.models import PollAttempt, PollMark, Server

    database = f"sqlite:///{workdir / 'monitor.db'}"
    config = Config(
        monitor=MonitorSettings(
            database_url=database, poll_interval=interval, poll_timeout=30, poll_concurrency=concurrency
        ),
        servers=[ServerConfig(name=f"s{i:05d}", transport="http", url=url) for i, url in enumerate(urls)],
        source="bench",
    )
    engine = make_engine(database)
    migrate(engine)
    owner = instance_id()
    store, _ = alerting_store(engine, config, hooks=[LeaseRelease(owner)])
    poller = Poller(store, config)
    scheduler = Scheduler(store, poller, config, owner)
    setup = time.monotonic()
    scheduler.register(datetime.now(UTC))
    fill(store, urls, interval)
    poller.recall()  # what `register` recalls when `serve` starts on a database a previous run filled
    print(f"  registered and filled {len(urls)} servers in {time.monotonic() - setup:.1f} s", file=sys.stderr)
    began = datetime.now(UTC)
    with store.sessions.begin() as session:  # the first slots spread over the interval from now
        rng = random.Random(7)
        for server in session.scalars(select(Server)):
            server.next_poll_at = began + timedelta(seconds=rng.uniform(0, interval))
    with store.sessions() as session:
        slots = {sid: at for sid, at in session.execute(select(Server.id, Server.next_poll_at)) if at}
    writer = poller.writer.submit(threading.get_native_id).result()
    stages = Stages(scheduler, poller)
    cpu0 = thread_cpu()
    clock0 = time.monotonic()
    with RssSampler(RSS_EVERY) as rss, long_running_heap():  # as `serve` runs its scheduler
        scheduler.start()
        sampler = asyncio.create_task(stages.sample(scheduler, interval))
        await asyncio.sleep(duration - (time.monotonic() - clock0))
        cpu1 = thread_cpu()
        sampler.cancel()
        await scheduler.stop()
    poller.close()
    loop_cpu = cpu1.get(os.getpid(), 0.0) - cpu0.get(os.getpid(), 0.0)
    store_cpu = sum(cpu1.values()) - sum(cpu0.values()) - loop_cpu
    writer_cpu = cpu1.get(writer, 0.0) - cpu0.get(writer, 0.0)
    starts: dict[int, list[datetime]] = {sid: [] for sid in slots}
    with store.sessions() as session:
        for sid, ms in session.execute(select(PollMark.server_id, PollMark.started_ms)):
            starts[sid].append(from_epoch_ms(ms))
        failed = 0
        for sid, at, ok in session.execute(
            select(PollAttempt.server_id, PollAttempt.started_at, PollAttempt.ok)
        ):
            starts[sid].append(at)
            failed += 0 if ok else 1
    engine.dispose()
    result = summary(
        "drift-monitor", len(urls), interval, slots, starts, began, duration, loop_cpu, store_cpu, rss, failed
    )
    result["writer_ms"] = 1000 * writer_cpu / max(result["polls"], 1)
    result["stages"] = stages.summary(duration)
    return result


class Stages:
    """Wall time per stage of the monitor's polls (issue 28: where polls wait, not what they burn):
    each claim (a transaction on a worker thread, one at a time under the scheduler's tick lock),
    each fetch (connect, handshake, `tools/list`, DELETE), and what follows it until `poll_one`
    returns (indexing, then waiting for the group commit); and the polls in flight, sampled."""

    def __init__(self, scheduler: Any, poller: Any) -> None:
        self.claims: list[tuple[float, int]] = []
        self.fetches: list[float] = []
        self.polls: list[float] = []
        self.in_flight: list[int] = []
        self.ticks: list[float] = []
        self.windows: list[tuple[int, float, float]] = []
        self.collections: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._collecting = 0.0
        gc.callbacks.append(self._on_collection)
        claim, fetch, poll_one, tick = scheduler.claim, poller._fetch, poller.poll_one, scheduler.tick

        async def timed_tick(**options: bool) -> None:  # as given: a --before tree's tick takes none
            started = time.perf_counter()
            try:
                await tick(**options)
            finally:
                self.ticks.append(time.perf_counter() - started)

        def timed_claim(*args: Any, **kwargs: Any) -> list[int]:
            started = time.perf_counter()
            ids: list[int] = claim(*args, **kwargs)
            self.claims.append((time.perf_counter() - started, len(ids)))
            return ids

        async def timed_fetch(job: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fetch(job)
            finally:
                self.fetches.append(time.perf_counter() - started)

        async def timed_poll(job: Any) -> Any:
            started = time.perf_counter()
            try:
                return await poll_one(job)
            finally:
                self.polls.append(time.perf_counter() - started)

        scheduler.claim, poller._fetch, poller.poll_one = timed_claim, timed_fetch, timed_poll
        scheduler.tick = timed_tick

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        """The garbage collector's own wall time, by generation: it runs on the loop's thread."""
        if phase == "start":
            self._collecting = time.perf_counter()
        else:
            self.collections[info["generation"]].append(time.perf_counter() - self._collecting)

    async def sample(self, scheduler: Any, interval: float) -> None:
        """Polls in flight every 0.25 s; every interval, the polls done and the CPU the loop's
        thread and the others spent in it, so the first window (every server's first poll in the
        process: a new connection and client each) shows next to the later ones."""
        loop_thread = threading.get_native_id()
        mark = (time.monotonic(), len(self.polls), thread_cpu())
        while True:
            self.in_flight.append(len(scheduler.in_flight))
            await asyncio.sleep(0.25)
            if time.monotonic() - mark[0] >= interval:
                cpu = thread_cpu()
                done = max(1, len(self.polls) - mark[1])
                loop = cpu.get(loop_thread, 0.0) - mark[2].get(loop_thread, 0.0)
                others = sum(cpu.values()) - sum(mark[2].values()) - loop
                self.windows.append((len(self.polls) - mark[1], 1000 * loop / done, 1000 * others / done))
                mark = (time.monotonic(), len(self.polls), cpu)

    def summary(self, duration: float) -> dict[str, Any]:
        q = common.quantile
        walls = [wall for wall, _ in self.claims]
        after = [max(0.0, p - f) for p, f in zip(self.polls, self.fetches, strict=False)]
        return {
            "in_flight_mean": sum(self.in_flight) / max(1, len(self.in_flight)),
            "claims_per_s": len(self.claims) / duration,
            "claimed_per_claim": sum(n for _, n in self.claims) / max(1, len(self.claims)),
            "claim_ms_p50": 1000 * q(walls, 0.5),
            "claim_ms_p99": 1000 * q(walls, 0.99),
            "claim_busy": sum(walls) / duration,
            "ticks_per_s": len(self.ticks) / duration,
            "tick_ms_p50": 1000 * q(self.ticks, 0.5),
            "tick_ms_p99": 1000 * q(self.ticks, 0.99),
            "tick_busy": sum(self.ticks) / duration,
            "fetch_ms_p50": 1000 * q(self.fetches, 0.5),
            "fetch_ms_p99": 1000 * q(self.fetches, 0.99),
            "record_ms_p50": 1000 * q(after, 0.5),
            "record_ms_p99": 1000 * q(after, 0.99),
            "poll_ms_p50": 1000 * q(self.polls, 0.5),
            **{
                f"gc{generation}": f"{len(walls)} x {1000 * sum(walls) / max(1, len(walls)):.1f} ms"
                for generation, walls in self.collections.items()
            },
            "gc_ms_per_poll": 1000 * sum(map(sum, self.collections.values())) / max(1, len(self.polls)),
            "per_window": [f"{n} polls, {loop:.2f}+{others:.2f} ms" for n, loop, others in self.windows],
        }


RSS_EVERY = 10.0
LAG_ALLOWED = 0.1
"""A poll counts as on time up to this share of the interval after its slot (the scheduler claims due
servers once a second, so a poll starts up to a second after its slot)."""


def fill(store: Any, urls: list[str], interval: float) -> None:
    """Record each server's current listing as a previous run would have, with the digest of the
    text the fleet sends, so the measured polls are the steady state (unchanged listings), not
    every server's first version."""
    from raw_fleet import VARIANTS, listings

    from monitor.collect.client.target import Listed
    from monitor.core.fingerprint import CanonicalListing
    from monitor.core.rules.metas import metas_digest, metas_of
    from monitor.store import polled
    from monitor.store.polled import SuccessfulPoll

    # the fleet sends no instructions; code that keeps them keeps their digest (a `--before` tree may not)
    kept = (
        {"instructions_digest": polled.instructions_digest(None)}
        if hasattr(polled, "instructions_digest")
        else {}
    )
    variants = listings(TOOLS)
    forms = [CanonicalListing.of(listing) for listing in variants]
    metas = [metas_of(listing) for listing in variants]
    texts = [Listed() for _ in forms]
    for text, listing in zip(texts, variants, strict=True):
        text.measure({"tools": listing})  # the one page's result, as the client measures it
    ids = dict(store_names(store))
    at = datetime.now(UTC) - timedelta(seconds=interval)
    for i in range(len(urls)):
        store.record(
            SuccessfulPoll(
                ids[f"s{i:05d}"],
                forms[i % VARIANTS],
                started_at=at,
                finished_at=at,
                pages=1,
                protocol_version="2025-11-25",
                server_info={"name": f"raw-{i:05d}", "version": "1.4.2"},
                capabilities={"tools": {"listChanged": False}},
                list_changed_advertised=False,
                metas=metas[i % VARIANTS],
                metas_digest=metas_digest(metas[i % VARIANTS]),
                digest=texts[i % VARIANTS].digest.digest(),
                **kept,
            )
        )


def store_names(store: Any) -> list[tuple[str, int]]:
    from sqlalchemy import select

    from monitor.store.models import Server

    with store.sessions() as session:
        return [(name, sid) for sid, name in session.execute(select(Server.id, Server.name))]


# -- the run ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def raw_fleet(servers: int) -> Iterator[tuple[list[str], list[int]]]:
    """The fleet's URLs and process ids; its processes stop when their stdin closes."""
    processes = []
    try:
        for first in range(0, servers, PER_FLEET_PROCESS):
            count = min(PER_FLEET_PROCESS, servers - first)
            argv = [
                sys.executable,
                str(BENCH / "raw_fleet.py"),
                "--servers",
                str(count),
                "--first",
                str(first),
            ]
            processes.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        urls: list[str] = []
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            if not line.startswith("READY "):
                raise RuntimeError(f"raw fleet did not start: {line!r}")
            urls += line.split()[1:]
        yield urls, [p.pid for p in processes]
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
        for process in processes:
            process.wait(timeout=30)


def contend(
    name: str, urls_file: Path, args: argparse.Namespace, fleet_pids: list[int], tree: str | None = None
) -> dict[str, Any]:
    """One contender in a process of its own; "before" is the monitor from `tree` (`--before`)."""
    argv = [
        sys.executable,
        __file__,
        *(["--tree", tree] if tree else []),
        "--contender",
        "monitor" if name == "before" else name,
        "--urls-file",
        str(urls_file),
        "--interval",
        str(args.interval),
        "--duration",
        str(args.duration),
        "--concurrency",
        str(args.concurrency),
        "--rss-every",
        str(args.rss_every),
    ]
    fleet_before = sum(common.cpu_seconds(pid) for pid in fleet_pids)
    result = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=args.duration * 3 + 600
    )
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    if name == "before":
        figures["name"] = "monitor before"
    figures["fleet_cpu_ms"] = (
        1000 * (sum(common.cpu_seconds(pid) for pid in fleet_pids) - fleet_before) / max(figures["polls"], 1)
    )
    return figures


def row(f: dict[str, Any], interval: float) -> str:
    kept = f["first_window"] >= 0.99 * f["servers"] and f["lag_p99"] < LAG_ALLOWED * interval
    return (
        f"{f['name']:<14} {f['servers']:>6} {f['first_window']:>7} {f['polls_per_s']:>8.1f} "
        f"{f['lag_p50']:>7.2f} {f['lag_p99']:>7.2f} {f['cpu_loop_ms']:>8.2f} {f['cpu_store_ms']:>8.2f} "
        f"{f['fleet_cpu_ms']:>8.2f} {f['rss_first_mb']:>7.0f} {f['rss_end_mb']:>7.0f} {f['failed']:>6}  "
        f"{'kept' if kept else 'NOT kept'}"
    )


def main(argv: list[str] | None = None) -> list[tuple[str, float, float, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rss-every", type=float, default=10.0)
    parser.add_argument("--contenders", default="raw,monitor", help="which to run, in order")
    parser.add_argument("--contender", choices=["raw", "monitor"], help=argparse.SUPPRESS)
    parser.add_argument("--urls-file", type=Path)
    parser.add_argument("--before", help="also the monitor of this git revision, first, in the same run")
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args(argv if argv is not None else [])
    global RSS_EVERY
    RSS_EVERY = args.rss_every
    if args.contender:
        if args.tree:  # the code before: its monitor first on the path
            sys.path.insert(0, args.tree)
            for module in [m for m in sys.modules if m == "monitor" or m.startswith("monitor.")]:
                del sys.modules[module]
        urls = args.urls_file.read_text().split()
        if args.contender == "raw":
            figures = asyncio.run(raw_contender(urls, args.interval, args.duration, args.concurrency))
        else:
            with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
                figures = asyncio.run(
                    monitor_contender(urls, args.interval, args.duration, args.concurrency, Path(tmp))
                )
                figures["db_mb"] = sum(f.stat().st_size for f in Path(tmp).iterdir()) / 1e6
        print(json.dumps(figures))
        return []

    rows: list[tuple[str, float, float, str]] = []
    header = (
        f"{'contender':<14} {'servers':>6} {'1st win':>7} {'polls/s':>8} {'lag p50':>7} {'lag p99':>7} "
        f"{'loop ms':>8} {'store ms':>8} {'fleet ms':>8} {'RSS 1st':>7} {'RSS end':>7} {'failed':>6}"
    )
    print(
        f"interval {args.interval:g} s, {args.duration:g} s per contender, concurrency {args.concurrency}, "
        f"{TOOLS} tools per server; CPU in ms per poll, lag in s, RSS in MB; {os.cpu_count()} cores, shared"
    )
    lines: list[str] = []
    for size in (int(s) for s in args.sizes.split(",")):
        with raw_fleet(size) as (urls, pids), tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
            urls_file = Path(tmp) / "urls"
            urls_file.write_text("\n".join(urls))
            with contextlib.ExitStack() as stack:
                tree = stack.enter_context(common.code_at(args.before)) if args.before else None
                names = args.contenders.split(",")
                if tree:
                    names.insert(names.index("monitor") if "monitor" in names else len(names), "before")
                figures = {
                    name: contend(name, urls_file, args, pids, tree if name == "before" else None)
                    for name in names
                }
        lines += [row(f, args.interval) for f in figures.values()]
        if set(figures) != {"raw", "monitor"}:
            lines += [
                f"  {f['name']} RSS (MB, every {args.rss_every:g} s): {f['rss_samples']}"
                + (
                    f"; where its polls waited (wall time): {json.dumps(f['stages'])}"
                    if "stages" in f
                    else ""
                )
                for f in figures.values()
            ]
            print("\n".join([header, *lines]), flush=True)
            continue
        raw, ours = figures["raw"], figures["monitor"]
        ratio = (ours["cpu_loop_ms"] + ours["cpu_store_ms"]) / max(raw["cpu_loop_ms"], 1e-9)
        lines.append(
            f"  {size} servers: our CPU per poll {ours['cpu_loop_ms'] + ours['cpu_store_ms']:.2f} ms "
            f"(writer thread {ours['writer_ms']:.2f}) = {ratio:.2f}x the raw client's; "
            f"database {ours['db_mb']:.1f} MB; RSS (MB, every {args.rss_every:g} s): {ours['rss_samples']}"
        )
        print("\n".join([header, *lines]), flush=True)
        print("  where the monitor's polls waited (wall time):", json.dumps(ours["stages"]))
        print()
        rows.append(
            (
                f"throughput {size}: CPU ms/poll (base=raw client)",
                ours["cpu_loop_ms"] + ours["cpu_store_ms"],
                raw["cpu_loop_ms"],
                "ratio (baseline/ours) at least 0.50: ours within 2x",
            )
        )
    return rows


if __name__ == "__main__":
    for figure, ours, baseline, goal in main(sys.argv[1:]):
        print(
            f"{figure}: ours {ours:.2f}, baseline {baseline:.2f}, ratio {baseline / ours:.2f}x, goal {goal}"
        )
