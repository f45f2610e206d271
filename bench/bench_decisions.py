"""The decision point as its callers see it: decisions and Claude Code hook calls over HTTP.

Goal (issues 10 and 29): a decision or a hook call answered, as the caller measures it, within 2x of
/healthz measured in the same run; a burst of 1,000 hook calls all answered within Claude Code's hook
timeout (5 s, as docs/approvals.md configures the HTTP hook).

The app runs in its own process, served the way `drift-monitor serve` serves it: a listening socket
from `monitor.service._listen` handed to uvicorn (`uvicorn.Server(config).serve(sockets=[listener])`,
one process, asyncio, h11, the garbage collector set by `long_running_heap`), over a SQLite file
holding 100 servers of 20 tools each, polled twice a few minutes before the run (so every listing is
fresh): the first version trusted on first use, the second flipping one tool's readOnlyHint on every
tenth server. This process is the caller, and measures what a caller sees: each request's latency
counts from when it was due (open-loop pacing at the offered rate), so a server that falls behind, or
a connection that stalls, shows it.

- `POST /api/v1/decisions`: 95% about approved tools (allow), 5% about the flipped tools (deny, each
  kept in the database), half of them with a `session_id` (a heart-beat at most every 30 s each);
- `POST /api/v1/hooks/claude-code`: the same mix as Claude Code's `PreToolUse` input (session_id,
  transcript_path, cwd, permission_mode, hook_event_name, tool_name `mcp__sNNN__tool_NN`,
  tool_input, tool_use_id): `{}` for approved tools, a deny for the flipped ones;
- `GET /healthz` (a `SELECT 1` on the same database): the baseline, in the same run.

Each at 200/s and 1,000/s, over 8 and over 64 kept-alive connections, and over a new connection per
request at 200/s. An answer with another status, or not the answer the tool should get, is an
error. A request still unanswered 3 s after the last one was due is given up and counted as
unanswered, with the time it had waited (a lower bound) among the latencies.

Then a burst: 1,000 Claude Code hook calls started at once, each on its own connection (as 1,000
hook processes would), each timed from the burst's start; how many got 200 with the answer their tool
should get, and whether all came within the hook's 5 s timeout. Meanwhile /healthz falls due every
10 ms over 8 kept-alive connections opened beforehand, each timed from when it was due.

Before and after the TCP_NODELAY fix (4ccd992): the kept-alive cases also run against a second app
process started with `--listen-proto0`, which reproduces the defect on purpose: it replaces
`monitor.service._listen` with the code before the fix, a socket made with protocol 0, so asyncio
does not set TCP_NODELAY on accepted connections, and an answer written in two parts (uvicorn writes
the head, then the body) has its body held back until the client acknowledges the head, which a
client in the middle of a request-answer exchange delays by about 40 ms. (Linux acknowledges at once
on a connection that was idle for longer than its retransmission timeout, 200 ms or more, so the
200/s cases over 64 connections, each used about 3 times a second, do not show it.) The two app
processes run side by side on copies of the same database, and each case runs against one, then
the other. `--no-proto0` skips them.

This process's garbage collector is off while it times a case (its own full collections paused it
for about 50 ms). The machine's load average, its busy share, the app's CPU (as a share of a core
and in ms per answer) and this process's are printed with each case: on a machine others load, the
caller (this process, Python) and the app share the same two cores.

    python bench/bench_decisions.py [--seconds 4] [--no-proto0]
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
import httpx
from support.polls import record_poll
from support.tools import tool

HOST = "127.0.0.1"
RATES = (200.0, 1000.0)
CONNECTIONS = (8, 64)
NEW_CONNECTION_RATE = 200.0
SECONDS = 4.0
"""Seconds of offered load per case (`--seconds`)."""
GIVE_UP_AFTER = 3.0
"""Seconds after the last request of a case was due, after which the ones still unanswered are given up."""
BURST = 1000
HOOK_TIMEOUT = 5.0
"""Claude Code's timeout for the HTTP hook, as docs/approvals.md configures it (`"timeout": 5`)."""
BURST_GIVE_UP = 30.0
HEALTH_EVERY = 0.01
PROBE_CONNECTIONS = 8
SERVERS = 100
TOOLS = 20
TOKEN = "bench-decisions-token"
ENDPOINTS = ("decisions", "hook", "healthz")
LABELS = {
    "decisions": "POST /api/v1/decisions",
    "hook": "POST /api/v1/hooks/claude-code",
    "healthz": "GET /healthz",
}
CONTENT_LENGTH = re.compile(rb"(?i)content-length: *(\d+)")
NO_OPINION = b"{}"
DENY = b'"permissionDecision":"deny"'


def tools(server: int, flipped: bool) -> list[dict[str, Any]]:
    return [
        tool(
            f"tool_{i:02d}",
            description=f"Tool {i} of server {server}.",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            annotations={"readOnlyHint": not (flipped and i == 0), "openWorldHint": False},
        )
        for i in range(TOOLS)
    ]


def build(database_url: str, servers: int = SERVERS) -> None:
    """`servers` servers polled twice, 10 and 5 minutes ago (fresh for three hourly intervals)."""
    from monitor.config import ServerConfig
    from monitor.store import Store, make_engine, migrate
    from monitor.store.registration import sync_servers

    engine = make_engine(database_url)
    migrate(engine)
    store = Store(engine)
    configs = [
        ServerConfig(name=f"s{n:03d}", transport="http", url="http://127.0.0.1:9/") for n in range(servers)
    ]
    now = datetime.now(UTC)
    ids = sync_servers(store, configs, now - timedelta(minutes=15))
    for n in range(servers):
        for version, flipped in enumerate((False, n % 10 == 0)):
            at = now - timedelta(minutes=10 - 5 * version)
            record_poll(store, ids[f"s{n:03d}"], tools(n, flipped), at)
    engine.dispose()


# --- the app's process ------------------------------------------------------------------------------


def listen_protocol_0(host: str, port: int) -> socket.socket:
    """`monitor.service._listen` as it was before 4ccd992, to reproduce the defect: the socket is made
    with protocol 0, so asyncio's `_set_nodelay` (which checks `sock.proto == IPPROTO_TCP`) leaves
    Nagle's algorithm on for every accepted connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(512)
    return listener


def serve(database_url: str, listen_proto0: bool) -> None:
    """The app's process: the app behind a listener from `monitor.service._listen`, handed to uvicorn,
    with the garbage collector set by `monitor.service.runtime.long_running_heap`, as `serve` does (with
    Python's defaults the app made full collections of 80-110 ms, 7 in three cases; with it, 2 of
    30-55 ms). Prints `READY <port> <the listener's protocol>`."""
    import uvicorn
    from support.web import make_app

    from monitor import service
    from monitor.service import runtime
    from monitor.store import Store, make_engine

    if listen_proto0:
        service._listen = listen_protocol_0  # the defect, on purpose (see the module's docstring)
    app = make_app(Store(make_engine(database_url)), token=TOKEN, clock=None)
    listener = service._listen(HOST, 0)
    print(f"READY {listener.getsockname()[1]} {listener.proto}", flush=True)
    config = uvicorn.Config(app, http="httptools", lifespan="on", log_level="warning", access_log=False)
    with runtime.long_running_heap():  # the garbage collector as `serve` sets it
        asyncio.run(uvicorn.Server(config).serve(sockets=[listener]))


@dataclass
class App:
    """An app process: its port, pid and the protocol its listener was made with."""

    name: str
    port: int
    pid: int
    proto: int


@contextmanager
def app_process(database_url: str, name: str, listen_proto0: bool = False) -> Iterator[App]:
    command = [sys.executable, __file__, "--serve", database_url]
    if listen_proto0:
        command.append("--listen-proto0")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        assert ready[:1] == ["READY"], ready
        app = App(name, int(ready[1]), process.pid, int(ready[2]))
        for _ in range(400):
            try:
                httpx.get(f"http://{HOST}:{app.port}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)
        yield app
    finally:
        process.terminate()
        process.wait(timeout=30)


# --- requests -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request, built once (the caller must cost little next to the app), and the answer it needs."""

    request: bytes
    expected: bytes = b""
    exact: bool = False

    def answered(self, status: bytes, body: bytes) -> bool:
        return status == b"200" and (body == self.expected if self.exact else self.expected in body)

    def closing(self) -> bytes:
        return self.request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)


def http_request(method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
    payload = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def pre_tool_use(server: str, tool_name: str, session_id: str, rng: random.Random) -> dict[str, Any]:
    """A `PreToolUse` hook input as Claude Code sends it for an MCP tool."""
    return {
        "session_id": session_id,
        "transcript_path": f"/home/dev/.claude/projects/-home-dev-project/{session_id}.jsonl",
        "cwd": "/home/dev/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": f"mcp__{server}__{tool_name}",
        "tool_input": {"q": f"query {rng.randrange(10_000)}"},
        "tool_use_id": f"toolu_01{rng.getrandbits(96):024x}",
    }


def calls(count: int = 20_000, seed: int = 10) -> dict[str, list[Call]]:
    """The three endpoints' requests: the same mix of servers and tools for decisions and hooks."""
    rng = random.Random(seed)
    sessions = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(50)]
    decisions, hooks = [], []
    for k in range(count):
        server_index = rng.randrange(SERVERS)
        deny = rng.random() < 0.05
        if deny:
            server_index -= server_index % 10  # a flipped server, its flipped tool
        server = f"s{server_index:03d}"
        tool_name = "tool_00" if deny else f"tool_{rng.randrange(1, TOOLS):02d}"
        body: dict[str, Any] = {"server": server, "tool": tool_name}
        if k % 2:
            body["session_id"] = f"gw-{k % 50}"
        decision = b'"decision":"deny"' if deny else b'"decision":"allow"'
        decisions.append(Call(http_request("POST", "/api/v1/decisions", body), decision))
        hook = pre_tool_use(server, tool_name, sessions[k % len(sessions)], rng)
        request = http_request("POST", "/api/v1/hooks/claude-code", hook)
        hooks.append(Call(request, DENY) if deny else Call(request, NO_OPINION, exact=True))
    return {"decisions": decisions, "hook": hooks, "healthz": [Call(http_request("GET", "/healthz"))]}


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = CONTENT_LENGTH.search(head)
    body = await reader.readexactly(int(length.group(1)) if length else 0)
    return head[9:12], body


# --- a case ---------------------------------------------------------------------------------------


@dataclass
class Result:
    offered: int
    latencies: list[float] = field(default_factory=list)
    """Milliseconds from due to answered, of every answered request (errors included)."""
    errors: int = 0
    """Answers with another status or not the expected answer, and requests whose connection failed."""
    unanswered: list[float] = field(default_factory=list)
    """Of requests given up: the milliseconds they had waited (lower bounds)."""
    span: float = 0.0
    """Seconds from the first request's due time to the last answer."""
    load: float = 0.0
    machine_busy: float = 0.0
    app_cpu: float = 0.0
    """The app process's CPU over the case, as a share of one core."""
    app_cpu_ms: float = 0.0
    """The app process's CPU milliseconds per answer (every thread: the event loop, the thread pool,
    the decision recorder)."""
    caller_cpu: float = 0.0

    @property
    def samples(self) -> list[float]:
        return self.latencies + self.unanswered

    @property
    def throughput(self) -> float:
        """Answers per second, from the first request's due time to the last answer."""
        return len(self.latencies) / self.span if self.span else float("nan")

    def p(self, q: float) -> float:
        return common.quantile(self.samples, q)

    @property
    def worst(self) -> float:
        return max(self.samples, default=float("nan"))

    def line(self, label: str) -> str:
        bound = ">=" if self.unanswered else "  "
        return (
            f"  {label:<40} n={self.offered:<5} p50 {self.p(0.5):7.2f}  p99 {bound}{self.p(0.99):8.2f}"
            f"  max {bound}{self.worst:8.2f} ms  {self.throughput:5.0f}/s answered  errors {self.errors}"
            f"  unanswered {len(self.unanswered)}"
            f"  | load {self.load:.1f}, machine {self.machine_busy:.0%}, app {self.app_cpu:.0%}"
            f" ({self.app_cpu_ms:.2f} ms CPU per answer), caller {self.caller_cpu:.0%}"
        )


async def kept_alive(port: int, todo: list[Call], rate: float, seconds: float, connections: int) -> Result:
    """Open-loop at `rate` over `connections` kept-alive connections, opened first: request k is due at
    start + k / rate, and goes out on the first connection free."""
    total = int(rate * seconds)
    result = Result(total)
    answered = bytearray(total)
    queue: asyncio.Queue[int] = asyncio.Queue()
    opened = await asyncio.gather(*(asyncio.open_connection(HOST, port) for _ in range(connections)))
    writers = [writer for _, writer in opened]

    async def connection(slot: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (k := await queue.get()) >= 0:
            call = todo[k % len(todo)]
            try:
                writer.write(call.request)
                status, body = await read_response(reader)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                result.errors += 1
                answered[k] = 1
                writer.close()
                reader, writer = await asyncio.open_connection(HOST, port)
                writers[slot] = writer
                continue
            now = time.perf_counter()
            result.latencies.append((now - (start + k / rate)) * 1000)
            result.span = now - start
            answered[k] = 1
            if not call.answered(status, body):
                result.errors += 1

    workers = [asyncio.create_task(connection(i, r, w)) for i, (r, w) in enumerate(opened)]
    start = time.perf_counter()
    for k in range(total):
        delay = start + k / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait(k)
    for _ in workers:
        queue.put_nowait(-1)
    _, pending = await asyncio.wait(workers, timeout=start + seconds + GIVE_UP_AFTER - time.perf_counter())
    given_up = time.perf_counter()
    for worker in pending:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    for writer in writers:
        writer.close()
    result.unanswered = [(given_up - (start + k / rate)) * 1000 for k in range(total) if not answered[k]]
    return result


async def new_connections(port: int, todo: list[Call], rate: float, seconds: float) -> Result:
    """Open-loop at `rate`, each request on a connection of its own (opened when it is due, closed after)."""
    total = int(rate * seconds)
    result = Result(total)

    async def one(k: int, due: float) -> None:
        call = todo[k % len(todo)]
        try:
            reader, writer = await asyncio.open_connection(HOST, port)
            try:
                writer.write(call.closing())
                status, body = await read_response(reader)
            finally:
                writer.close()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            result.errors += 1
            return
        now = time.perf_counter()
        result.latencies.append((now - due) * 1000)
        result.span = max(result.span, now - start)
        if not call.answered(status, body):
            result.errors += 1

    tasks: dict[asyncio.Task[None], float] = {}
    start = time.perf_counter()
    for k in range(total):
        due = start + k / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks[asyncio.create_task(one(k, due))] = due
    _, pending = await asyncio.wait(tasks, timeout=start + seconds + GIVE_UP_AFTER - time.perf_counter())
    given_up = time.perf_counter()
    for task in pending:
        task.cancel()
    result.unanswered = [(given_up - tasks[task]) * 1000 for task in pending]
    return result


# --- the burst ------------------------------------------------------------------------------------


@dataclass
class Burst:
    latencies: list[float] = field(default_factory=list)
    """Milliseconds from the start of the burst to each answer (every answer, whatever it said)."""
    answers: dict[str, int] = field(default_factory=dict)
    """How many answered 200 with no opinion (`{}`), with a deny, or with anything else."""
    failures: dict[str, int] = field(default_factory=dict)
    """Requests that got no answer, by why."""
    in_time: int = 0
    """Answered 200 with the expected answer within HOOK_TIMEOUT."""
    health_before: list[float] = field(default_factory=list)
    health_during: list[float] = field(default_factory=list)
    load: float = 0.0

    @property
    def good(self) -> int:
        return self.answers.get("no opinion", 0) + self.answers.get("deny", 0)


async def burst(port: int, hooks: list[Call], health: Call, count: int = BURST) -> Burst:
    """`count` hook calls started at once, each on a connection of its own. Meanwhile /healthz is due
    every 10 ms, open-loop, over PROBE_CONNECTIONS kept-alive connections opened beforehand (a probe
    waits for a free one), from half a second before the burst until its last answer; a probe's
    latency counts from when it was due, and it belongs to the burst when it fell due after its start."""
    result = Burst()
    finished = asyncio.Event()
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(PROBE_CONNECTIONS):
        pool.put_nowait(await asyncio.open_connection(HOST, port))
    start = float("inf")

    async def probe(due: float) -> None:
        reader, writer = await pool.get()
        writer.write(health.request)
        await read_response(reader)
        pool.put_nowait((reader, writer))
        took = (time.perf_counter() - due) * 1000
        (result.health_during if due >= start else result.health_before).append(took)

    async def probes() -> None:
        first, k, running = time.perf_counter(), 0, []
        while not finished.is_set():
            due = first + k * HEALTH_EVERY
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            running.append(asyncio.create_task(probe(due)))
            k += 1
        await asyncio.gather(*running)

    async def one(call: Call) -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            writer.write(call.closing())
            status, body = await read_response(reader)
        finally:
            writer.close()
        took = (time.perf_counter() - start) * 1000
        result.latencies.append(took)
        if not call.answered(status, body):
            kind = f"other ({status.decode()})"
        else:
            kind = "no opinion" if call.exact else "deny"
            result.in_time += took <= HOOK_TIMEOUT * 1000
        result.answers[kind] = result.answers.get(kind, 0) + 1

    prober = asyncio.create_task(probes())
    await asyncio.sleep(0.5)
    result.load = os.getloadavg()[0]
    start = time.perf_counter()
    tasks = [asyncio.create_task(asyncio.wait_for(one(call), BURST_GIVE_UP)) for call in hooks[:count]]
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finished.set()
    await prober
    while not pool.empty():
        pool.get_nowait()[1].close()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            why = errno.errorcode.get(getattr(outcome, "errno", None) or 0, type(outcome).__name__)
            result.failures[why] = result.failures.get(why, 0) + 1
    return result


def print_burst(result: Burst) -> None:
    latencies = result.latencies
    print(f"burst of {BURST} Claude Code hook calls at once, one connection each (load {result.load:.1f}):")
    answers = ", ".join(f"{n} {kind}" for kind, n in sorted(result.answers.items())) or "none"
    failures = ", ".join(f"{n} {why}" for why, n in sorted(result.failures.items())) or "none"
    print(f"  answered 200 with the expected answer: {result.good} of {BURST} ({answers})")
    print(f"  no answer within {BURST_GIVE_UP:.0f} s: {failures}")
    print(
        f"  latency from the burst's start: p50 {common.quantile(latencies, 0.5):.0f} ms,"
        f" p99 {common.quantile(latencies, 0.99):.0f} ms, max {max(latencies, default=float('nan')):.0f} ms"
    )
    verdict = "yes" if result.in_time == BURST else "NO"
    print(
        f"  every answer within Claude Code's {HOOK_TIMEOUT:.0f} s hook timeout: {verdict}"
        f" ({result.in_time} of {BURST})"
    )
    for label, samples in (("before", result.health_before), ("during", result.health_during)):
        print(
            f"  /healthz {label} the burst (due every 10 ms, {PROBE_CONNECTIONS} kept-alive):"
            f" n={len(samples)} p50 {common.quantile(samples, 0.5):.2f} ms,"
            f" p99 {common.quantile(samples, 0.99):.2f} ms, max {max(samples, default=float('nan')):.2f} ms"
        )


# --- the run ------------------------------------------------------------------------------------

Case = tuple[float, int | None]
"""(offered rate, kept-alive connections, or None for a new connection per request)."""
KEPT_ALIVE: list[Case] = [(rate, connections) for connections in CONNECTIONS for rate in RATES]
CASES: list[Case] = [*KEPT_ALIVE, (NEW_CONNECTION_RATE, None)]
Results = dict[tuple[str, str, Case], Result]
"""By app ('fixed' or 'proto0'), endpoint and case."""


def case_name(case: Case) -> str:
    rate, connections = case
    over = f"{connections} kept-alive" if connections else "new connection each"
    return f"{rate:,.0f}/s, {over}"


@contextmanager
def caller_collector_off() -> Iterator[None]:
    """This process's garbage collector off while it times requests, on again after: a full
    collection of the caller's heap (the requests built for every case, the results so far) paused
    it for about 50 ms, which showed as a stall of the app in a 200/s case's p99."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_case(app: App, todo: list[Call], case: Case, seconds: float) -> Result:
    """One case against `app`, with the machine's load and busy share and the app's and this process's
    CPU around it."""
    rate, connections = case
    load = os.getloadavg()[0]
    busy0, total0 = common.machine_busy()
    app0, caller0 = common.cpu_seconds(app.pid), common.cpu_seconds()
    started = time.perf_counter()
    with caller_collector_off():
        if connections:
            result = asyncio.run(kept_alive(app.port, todo, rate, seconds, connections))
        else:
            result = asyncio.run(new_connections(app.port, todo, rate, seconds))
    wall = time.perf_counter() - started
    busy1, total1 = common.machine_busy()
    result.load = load
    result.machine_busy = (busy1 - busy0) / max(1, total1 - total0)
    app_seconds = common.cpu_seconds(app.pid) - app0
    result.app_cpu = app_seconds / wall
    result.app_cpu_ms = app_seconds * 1000 / max(1, len(result.latencies))
    result.caller_cpu = (common.cpu_seconds() - caller0) / wall
    return result


@contextmanager
def apps(folder: Path, proto0: bool) -> Iterator[list[App]]:
    """The app as `serve` serves it ('fixed'), and with `proto0` also the defect ('proto0'), each on
    its own copy of one database."""
    database = folder / "decisions.db"
    started = time.perf_counter()
    build(f"sqlite:///{database}")
    print(f"built {SERVERS} servers x {TOOLS} tools x 2 versions in {time.perf_counter() - started:.1f} s")
    with ExitStack() as stack:
        started_apps = [stack.enter_context(app_process(f"sqlite:///{database}", "fixed"))]
        if proto0:
            shutil.copy(database, folder / "proto0.db")
            defect = app_process(f"sqlite:///{folder / 'proto0.db'}", "proto0", listen_proto0=True)
            started_apps.append(stack.enter_context(defect))
        yield started_apps


def main(seconds: float = SECONDS, proto0: bool = True) -> list[tuple[str, float, float, str]]:
    requests = calls()
    results: Results = {}
    with tempfile.TemporaryDirectory() as folder, apps(Path(folder), proto0) as started:
        for app in started:
            nodelay = "IPPROTO_TCP: TCP_NODELAY on accepted connections" if app.proto else "0: Nagle left on"
            print(f"app '{app.name}': listener protocol {app.proto} ({nodelay})")
            for endpoint in ("decisions", "hook"):  # the views, the sessions, the connections' first use
                asyncio.run(kept_alive(app.port, requests[endpoint], 500.0, 1.0, 8))
        for case in CASES:
            against = started if case[1] else started[:1]
            print(f"{case_name(case)} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
            for endpoint in ENDPOINTS:
                for app in against:
                    result = run_case(app, requests[endpoint], case, seconds)
                    results[app.name, endpoint, case] = result
                    print(result.line(f"{LABELS[endpoint]} [{app.name}]"), flush=True)
        with caller_collector_off():
            burst_result = asyncio.run(burst(started[0].port, requests["hook"], requests["healthz"][0]))
        print_burst(burst_result)
    print_tables(results, proto0)
    return rows(results, burst_result, proto0)


def _cell(result: Result, q: float | None) -> str:
    value = result.worst if q is None else result.p(q)
    return f"{'>=' if result.unanswered else ''}{value:.1f}"


def print_tables(results: Results, proto0: bool) -> None:
    print()
    print("Latency a caller sees, ms from when each request was due (the fix in place):")
    print()
    print("| case | endpoint | p50 | p99 | max | answered/s | app CPU ms/answer | errors | unanswered |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        for endpoint in ENDPOINTS:
            r = results["fixed", endpoint, case]
            print(
                f"| {case_name(case)} | `{LABELS[endpoint]}` | {_cell(r, 0.5)} | {_cell(r, 0.99)}"
                f" | {_cell(r, None)} | {r.throughput:.0f} | {r.app_cpu_ms:.2f} | {r.errors}"
                f" | {len(r.unanswered)} |"
            )
    if not proto0:
        return
    print()
    print("Before the fix (protocol 0: no TCP_NODELAY) and after it (IPPROTO_TCP), kept-alive, ms:")
    print()
    print("| case | endpoint | p50 before | after | p99 before | after | max before | after | unanswered |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in KEPT_ALIVE:
        for endpoint in ENDPOINTS:
            before, after = results["proto0", endpoint, case], results["fixed", endpoint, case]
            print(
                f"| {case_name(case)} | `{LABELS[endpoint]}` | {_cell(before, 0.5)} | {_cell(after, 0.5)}"
                f" | {_cell(before, 0.99)} | {_cell(after, 0.99)} | {_cell(before, None)}"
                f" | {_cell(after, None)} | {len(before.unanswered)} of {before.offered} |"
            )


def rows(results: Results, burst_result: Burst, proto0: bool) -> list[tuple[str, float, float, str]]:
    out = []
    for case in CASES:
        rate, connections = case
        over = f"x{connections}" if connections else "new conn"
        baseline = results["fixed", "healthz", case].p(0.99)
        for endpoint in ("decisions", "hook"):
            ours = results["fixed", endpoint, case].p(0.99)
            figure = f"{endpoint} p99 ms @{rate:.0f}/s {over} (vs /healthz)"
            out.append((figure, ours, baseline, "within 2x of /healthz"))
    if proto0:
        for case in KEPT_ALIVE:
            rate, connections = case
            before, after = results["proto0", "decisions", case], results["fixed", "decisions", case]
            figure = f"decisions p50 ms @{rate:.0f}/s x{connections} (vs no NODELAY)"
            out.append((figure, after.p(0.5), before.p(0.5), "no delayed-ACK stall"))
    latencies, health = burst_result.latencies, burst_result.health_during
    timeout_ms = HOOK_TIMEOUT * 1000
    return [
        *out,
        (
            "burst 1,000 hooks: max ms (vs /healthz during)",
            max(latencies, default=float("nan")),
            max(health, default=float("nan")),
            f"< {timeout_ms:.0f} ms (the hook's timeout)",
        ),
        (
            "burst 1,000 hooks: p99 ms (vs /healthz during)",
            common.quantile(latencies, 0.99),
            common.quantile(health, 0.99),
            f"< {timeout_ms:.0f} ms",
        ),
        ("burst 1,000 hooks: answered in time (of)", burst_result.in_time, BURST, "all"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", metavar="DATABASE_URL", help=argparse.SUPPRESS)
    parser.add_argument(
        "--listen-proto0",
        action="store_true",
        help="with --serve: reproduce the defect fixed in 4ccd992 (a listener of protocol 0, no TCP_NODELAY)",
    )
    parser.add_argument("--seconds", type=float, default=SECONDS, help="seconds of load per case")
    parser.add_argument("--no-proto0", action="store_true", help="skip the cases before the fix")
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.listen_proto0)
    else:
        for figure, ours, baseline, goal in main(options.seconds, proto0=not options.no_proto0):
            print(f"{figure:<48} {ours:>10.2f} {baseline:>10.2f}  {goal}")
