"""A burst of Claude Code hook calls at a `serve` that is polling: is the decision path starved?

Goal (issue 28, item 3): under 1,000 simultaneous Claude Code hook calls, every answer within the
hook's 5 s timeout with p99 under 1 s, never an `allow` and never a non-2xx (Claude Code runs the
tool on either), and `/healthz` responsive meanwhile, while the same process polls a fleet.

The app process runs `monitor.service.serve` itself (scheduler, poller, store, web app, one
process, as `drift-monitor serve` runs it) on a SQLite file holding `bench_decisions`' 100
servers of 20 tools (fresh listings, every tenth server with a flipped tool) and `--fleet`
raw-fleet servers (`raw_fleet.py`, 50 tools each) on a `--interval` interval, their current
listings recorded beforehand (`bench_throughput.fill`), so the polls are the steady state.

This process is the caller. It opens 1,000 connections and keeps them alive, then writes one hook
call on each at once (as 1,000 hook processes with kept-alive connections would) and times each
answer from the burst's start; meanwhile `/healthz` falls due every 10 ms over 8 more kept-alive
connections, each timed from when it was due. Each answer is sorted: decided (the answer its tool
should get: `{}` for an approved tool, a deny for a flipped one), answered without deciding (the
fail-closed answer of a full decision lane: `ask`, or `deny`), an `allow` or another status (an
error), or none within 30 s.

The app answers decisions on its main port and, from a process of its own, on the `[decisions]
listen` port (`monitor.service.decisions`); each round sends one burst at each, so the main port's
figures are the baseline of the decision process's, in the same run and the same app.

`--before REV` runs the same against the code at git revision REV (extracted with `git archive`
into a temporary folder) in the same run, first, on the same servers and the same fleet (its
database built and migrated by that revision's own code, whose schema may be older): the
figures to compare are the two rows of one run, not figures of another day.

    python bench/bench_hook_burst.py [--before REV] [--fleet 1000] [--interval 30] [--bursts 3]
                                     [--processes 2] [--revoked]

`--revoked` makes every call of a burst one about a tool that lost its read-only hint, as in an
incident: each should get a deny, and one answered without deciding gets only `ask`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import common
from bench_decisions import BURST, HOOK_TIMEOUT, HOST, TOKEN, Call, calls, read_response

BENCH = Path(__file__).resolve().parent
PROBE_EVERY = 0.01
PROBE_CONNECTIONS = 8
GIVE_UP = 30.0
WARM = 8.0
"""Seconds of polling before the first burst (the fleet's kept clients and the decision views)."""
ASK = b'"permissionDecision":"ask"'
DENY = b'"permissionDecision":"deny"'
ALLOW = b'"permissionDecision":"allow"'


# --- the app's process ------------------------------------------------------------------------------


def serve_app(
    database: Path,
    urls_file: Path,
    interval: float,
    tree: str | None,
    decision_port: int | None,
    processes: int,
) -> None:
    """`serve` over the decision servers and the fleet; prints `READY <port>`."""
    if tree:  # the code before: its monitor and tests/support first on the path
        sys.path[:0] = [tree, str(Path(tree) / "tests")]
        for name in [n for n in sys.modules if n == "support" or n.startswith(("monitor", "support."))]:
            del sys.modules[name]
        del sys.modules["bench_decisions"]  # its `record_poll` is the tree's too
    from bench_decisions import build
    from bench_throughput import fill

    from monitor import service
    from monitor.config import Config, DecisionSettings, MonitorSettings, ServerConfig
    from monitor.store import Store, make_engine
    from monitor.store.registration import sync_servers

    urls = urls_file.read_text().split()
    url = f"sqlite:///{database}"
    build(url)  # with this code's migrations: an older revision's schema may differ
    servers = [
        ServerConfig(name=f"s{n:03d}", transport="http", url="http://127.0.0.1:9/", interval=3600)
        for n in range(100)
    ] + [ServerConfig(name=f"s{i:05d}", transport="http", url=u) for i, u in enumerate(urls)]
    config = Config(
        monitor=MonitorSettings(database_url=url, poll_interval=interval, poll_timeout=10),
        servers=servers,
        source="bench",
    )
    if decision_port is not None:
        config.decisions = DecisionSettings(listen=f"{HOST}:{decision_port}", processes=processes)
    engine = make_engine(url)
    store = Store(engine)
    sync_servers(store, servers, datetime.now(UTC))
    fill(store, urls, interval)
    engine.dispose()
    os.environ[config.monitor.api_token_env] = TOKEN
    ready = lambda address: print(f"READY {address.rsplit(':', 1)[1]}", flush=True)  # noqa: E731
    asyncio.run(service.serve(config, HOST, 0, ready=ready))


@dataclass
class App:
    name: str
    port: int
    pid: int
    decision_port: int | None

    def cpu_seconds(self) -> float:
        """The app's CPU time so far, its decision process's included."""
        children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        total = common.cpu_seconds(self.pid)
        for child in children:
            with suppress(OSError):  # a process that has just ended
                total += common.cpu_seconds(int(child))
        return total


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
    return port


@contextmanager
def app_process(
    name: str, database: Path, urls_file: Path, interval: float, tree: str | None, processes: int
) -> Iterator[App]:
    has_process = tree is None or (Path(tree) / "monitor" / "service" / "decisions.py").exists()
    decision_port = free_port() if has_process else None  # the code before may have none
    command = [sys.executable, __file__, "--serve", str(database), "--urls-file", str(urls_file)]
    command += ["--interval", str(interval), *(["--tree", tree] if tree else [])]
    command += ["--decision-port", str(decision_port), "--processes", str(processes)] if decision_port else []
    log = database.with_suffix(".log")
    with log.open("w") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        if ready[:1] != ["READY"]:
            raise RuntimeError(f"the app did not start:\n{log.read_text()[-3000:]}")
        app = App(name, int(ready[1]), process.pid, decision_port)
        if decision_port:  # answered once the decision process has started
            asyncio.run(read_once(decision_port, calls()["healthz"][0]))
        yield app
    finally:
        process.terminate()
        process.wait(timeout=60)


# --- the burst ------------------------------------------------------------------------------------


@dataclass
class Burst:
    latencies: list[float] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    in_time: int = 0
    health: list[float] = field(default_factory=list)
    load: float = 0.0
    busy: float = 0.0
    app_cpu: float = 0.0


def sort(call: Call, status: bytes, body: bytes) -> str:
    if status != b"200":
        return f"status {status.decode()}"
    if ALLOW in body:
        return "allow (error)"
    if call.answered(status, body):
        return "decided"
    if ASK in body or DENY in body:
        return "without deciding"
    return "other answer (error)"


async def burst(port: int, hooks: list[Call], health: Call, count: int) -> Burst:
    result = Burst()
    connections = []
    for _ in range(count):
        connections.append(await asyncio.open_connection(HOST, port))
    probes_pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(PROBE_CONNECTIONS):
        probes_pool.put_nowait(await asyncio.open_connection(HOST, port))
    finished = asyncio.Event()
    start = 0.0

    async def probe(due: float) -> None:
        reader, writer = await probes_pool.get()
        writer.write(health.request)
        await read_response(reader)
        probes_pool.put_nowait((reader, writer))
        result.health.append((time.perf_counter() - due) * 1000)

    async def probes() -> None:
        first, k, running = time.perf_counter(), 0, []
        while not finished.is_set():
            due = first + k * PROBE_EVERY
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            running.append(asyncio.create_task(probe(due)))
            k += 1
        await asyncio.gather(*running)

    async def one(call: Call, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(call.request)
        status, body = await read_response(reader)
        took = (time.perf_counter() - start) * 1000
        result.latencies.append(took)
        kind = sort(call, status, body)
        result.kinds[kind] = result.kinds.get(kind, 0) + 1
        result.in_time += kind in ("decided", "without deciding") and took <= HOOK_TIMEOUT * 1000

    await asyncio.sleep(0.5)  # the connections settled
    result.load = os.getloadavg()[0]
    start = time.perf_counter()
    prober = asyncio.create_task(probes())
    tasks = [
        asyncio.create_task(asyncio.wait_for(one(call, *pair), GIVE_UP))
        for call, pair in zip(hooks[:count], connections, strict=True)
    ]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finished.set()
    await prober
    lost = sum(isinstance(outcome, BaseException) for outcome in outcomes)
    if lost:
        result.kinds["no answer"] = lost
    for _, writer in connections:
        writer.close()
    while not probes_pool.empty():
        probes_pool.get_nowait()[1].close()
    return result


async def read_once(port: int, call: Call) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(call.request)
    await read_response(reader)
    writer.close()


def run_burst(app: App, port: int, hooks: list[Call], health: Call, count: int) -> Burst:
    busy0, total0 = common.machine_busy()
    cpu0, wall0 = app.cpu_seconds(), time.perf_counter()
    gc.collect()
    gc.disable()
    try:
        result = asyncio.run(burst(port, hooks, health, count))
    finally:
        gc.enable()
    busy1, total1 = common.machine_busy()
    result.busy = (busy1 - busy0) / max(1, total1 - total0)
    result.app_cpu = (app.cpu_seconds() - cpu0) / (time.perf_counter() - wall0)
    return result


def line(name: str, result: Burst, count: int) -> str:
    q = common.quantile
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(result.kinds.items()))
    return (
        f"{name:<10} p50 {q(result.latencies, 0.5):6.0f}  p99 {q(result.latencies, 0.99):6.0f}  "
        f"max {max(result.latencies, default=float('nan')):6.0f} ms  in {HOOK_TIMEOUT:.0f} s: "
        f"{result.in_time:>4}/{count}  /healthz p50 {q(result.health, 0.5):5.1f} p99 "
        f"{q(result.health, 0.99):6.1f} max {max(result.health, default=float('nan')):6.1f} ms  "
        f"(load {result.load:.1f}, machine {100 * result.busy:.0f}% busy, app {100 * result.app_cpu:.0f}% "
        f"of a core)  [{kinds}]"
    )


# --- the run ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> list[tuple[str, float, float, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a git revision to measure first, in the same run")
    parser.add_argument("--fleet", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--count", type=int, default=BURST)
    parser.add_argument("--serve")
    parser.add_argument("--urls-file")
    parser.add_argument("--tree")
    parser.add_argument("--decision-port", type=int)
    parser.add_argument("--processes", type=int, default=2, help="[decisions] processes")
    parser.add_argument(
        "--revoked", action="store_true", help="every call about a tool that lost its read-only hint"
    )
    args = parser.parse_args([] if argv is None else argv)
    if args.serve:
        serve_app(
            Path(args.serve),
            Path(args.urls_file),
            args.interval,
            args.tree,
            args.decision_port,
            args.processes,
        )
        return []
    from bench_throughput import raw_fleet

    requests = calls(40_000 if args.revoked else 20_000)
    hooks, health = requests["hook"], requests["healthz"][0]
    if args.revoked:  # only the flipped tools' calls: each should be a deny
        hooks = [call for call in hooks if not call.exact]
    results: dict[str, list[Burst]] = {}
    with tempfile.TemporaryDirectory() as folder, raw_fleet(args.fleet) as (urls, _pids):
        urls_file = Path(folder) / "urls"
        urls_file.write_text(" ".join(urls))
        trees = [("before", args.before), ("now", None)] if args.before else [("now", None)]
        for name, revision in trees:
            database = Path(folder) / f"{name}.db"
            with ExitStack() as stack:
                tree = stack.enter_context(common.code_at(revision)) if revision else None
                with app_process(name, database, urls_file, args.interval, tree, args.processes) as app:
                    time.sleep(WARM)
                    print(f"{name}: polling {args.fleet} servers every {args.interval:.0f} s", flush=True)
                    prefix = "before " if name == "before" else ""
                    ports = [(name, app.port)]
                    if app.decision_port:
                        ports = [(f"{prefix}main port", app.port), (f"{prefix}decisions", app.decision_port)]
                    for k in range(args.bursts):
                        offset = (k * args.count) % (len(hooks) - args.count)
                        for row, port in ports:
                            result = run_burst(app, port, hooks[offset:], health, args.count)
                            results.setdefault(row, []).append(result)
                            print("  " + line(row, result, args.count), flush=True)
    worst = {
        name: max(common.quantile(b.latencies, 0.99) for b in bursts) for name, bursts in results.items()
    }
    figures = [
        (
            f"hook burst {args.count} while polling, decision process: worst p99 ms",
            worst["decisions"],
            worst["main port"],
            "< 1000",
        )
    ]
    print(json.dumps({name: [b.kinds for b in bursts] for name, bursts in results.items()}))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
