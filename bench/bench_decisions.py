"""The decision point under load: 1,000 decisions/s through `POST /api/v1/decisions` over HTTP.

Goal (issue 10): p99 under 5 ms of server time, and within 2x of /healthz measured in the same run.

The web app runs in its own process (uvicorn, one worker, as `serve` runs it) over a SQLite file
holding 100 servers of 20 tools each, polled twice: the first version trusted on first use, the
second flipping one tool's readOnlyHint on every tenth server. An ASGI wrapper in the server
process records each request's server time (from the request reaching the app to the last byte of
the answer handed to uvicorn); the client, this process, paces requests open-loop at the target
rate over a pool of keep-alive connections and records the latency it saw. The mix: 95% decisions
about approved tools (allow), 5% about the flipped tools (deny, each kept in the database), half of
them with a `session_id` (a heart-beat at most every 30 s per session). Then /healthz, which runs a
`SELECT 1` on the same database, at the same rate: the baseline. Both at 1,000/s (the goal) and at
100/s: on a machine the rest of the team is loading, 1,000/s may be more than one uvicorn process
gets CPU for, and then server time is mostly queueing; at 100/s it is the service time. The machine's
load average is printed with each run.

    python bench/bench_decisions.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common
import httpx
from support.polls import record_poll
from support.tools import tool

RATE = 1000.0
RATES = (RATE, 100.0)
"""The goal's rate, and one a loaded machine sustains, where server time is service time, not queueing."""
SERVERS = 100
TOOLS = 20
CONNECTIONS = 16
TOKEN = "bench-decisions-token"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


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


def build(database_url: str) -> None:
    from monitor.config import ServerConfig
    from monitor.store import Store, make_engine, migrate
    from monitor.store.registration import sync_servers

    engine = make_engine(database_url)
    migrate(engine)
    store = Store(engine)
    configs = [
        ServerConfig(name=f"s{n:03d}", transport="http", url="http://127.0.0.1:9/") for n in range(SERVERS)
    ]
    ids = sync_servers(store, configs, T0)
    for n in range(SERVERS):
        for version, flipped in enumerate((False, n % 10 == 0)):
            at = T0 + timedelta(minutes=version)
            record_poll(store, ids[f"s{n:03d}"], tools(n, flipped), at)
    engine.dispose()


def serve(database_url: str, port: int) -> None:
    """The server process: the app behind a wrapper that records server time per path."""
    import uvicorn
    from starlette.types import Message, Receive, Scope, Send
    from support.web import make_app

    from monitor.store import Store, make_engine

    app = make_app(Store(make_engine(database_url)), token=TOKEN, clock=None)
    timings: dict[str, list[float]] = {}

    async def timed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/bench/timings":
            body = json.dumps(timings).encode()
            timings.clear()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        start = time.perf_counter()

        async def send_timed(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                timings.setdefault(path, []).append((time.perf_counter() - start) * 1000)

        await app(scope, receive, send_timed)

    print("READY", flush=True)
    uvicorn.run(timed, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def http_request(method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
    """One HTTP/1.1 keep-alive request, built once: the client must cost little next to the server."""
    payload = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def drive(
    port: int, seconds: float, requests: list[bytes], rate: float
) -> tuple[list[float], int, float]:
    """Open-loop at `rate` over CONNECTIONS keep-alive connections: request k is due at start + k/rate,
    and its latency counts from when it was due, so a server that falls behind shows it."""
    total = int(rate * seconds)
    latencies: list[float] = []
    errors = 0
    due_queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()

    async def connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while (item := await due_queue.get()) is not None:
                k, due = item
                writer.write(requests[k % len(requests)])
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(length.group(1)) if length else 0)
                latencies.append((time.perf_counter() - due) * 1000)
                if head[9:12] != b"200":
                    errors += 1
        finally:
            writer.close()

    workers = [asyncio.create_task(connection()) for _ in range(CONNECTIONS)]
    start = time.perf_counter()
    for k in range(total):
        due = start + k / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        due_queue.put_nowait((k, due))
    for _ in workers:
        due_queue.put_nowait(None)
    await asyncio.gather(*workers)
    return latencies, errors, total / (time.perf_counter() - start)


def main(seconds: float = 10.0) -> list[tuple[str, float, float, str]]:
    rng = random.Random(10)
    with tempfile.TemporaryDirectory() as folder:
        database_url = f"sqlite:///{Path(folder) / 'decisions.db'}"
        started = time.perf_counter()
        build(database_url)
        print(
            f"built {SERVERS} servers x {TOOLS} tools x 2 versions in {time.perf_counter() - started:.1f} s"
        )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", database_url, "--port", str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "READY"
            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                try:
                    httpx.get(f"{base}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.05)

            decisions = []
            for k in range(20_000):
                server_index = rng.randrange(SERVERS)
                deny = rng.random() < 0.05
                if deny:
                    server_index -= server_index % 10  # a flipped server, its flipped tool
                body: dict[str, Any] = {
                    "server": f"s{server_index:03d}",
                    "tool": "tool_00" if deny else f"tool_{rng.randrange(1, TOOLS):02d}",
                }
                if k % 2:
                    body["session_id"] = f"gw-{k % 50}"
                decisions.append(http_request("POST", "/api/v1/decisions", body))
            health = [http_request("GET", "/healthz")]

            asyncio.run(drive(port, 1.0, decisions, RATE))  # warm the view and the connections
            httpx.get(f"{base}/bench/timings", timeout=10)
            runs = {}
            for rate in RATES:
                load = os.getloadavg()[0]
                client_decisions, errors, achieved = asyncio.run(drive(port, seconds, decisions, rate))
                server_decisions = httpx.get(f"{base}/bench/timings", timeout=10).json()["/api/v1/decisions"]
                client_health, health_errors, health_rate = asyncio.run(drive(port, seconds, health, rate))
                server_health = httpx.get(f"{base}/bench/timings", timeout=10).json()["/healthz"]
                runs[rate] = (server_decisions, server_health, achieved, health_rate)
                print(f"offered {rate:.0f}/s (machine load average {load:.1f} on {os.cpu_count()} cores):")
                print(f"  decisions: {len(client_decisions)} at {achieved:.0f}/s, {errors} errors")
                print(f"  healthz: {len(client_health)} at {health_rate:.0f}/s, {health_errors} errors")
                for label, samples in (
                    ("decisions server", server_decisions),
                    ("healthz server", server_health),
                    ("decisions client", client_decisions),
                    ("healthz client", client_health),
                ):
                    print(
                        f"  {label:<18} p50 {statistics.median(samples):7.2f} ms"
                        f"  p99 {common.quantile(samples, 0.99):7.2f} ms  max {max(samples):8.2f} ms"
                        f"  (n={len(samples)})"
                    )
        finally:
            server.terminate()
            server.wait(timeout=30)
    rows = []
    for rate, (server_decisions, server_health, achieved, _) in runs.items():
        rows += [
            (
                f"@{rate:.0f}/s decision p50 server ms (vs /healthz)",
                statistics.median(server_decisions),
                statistics.median(server_health),
                "-",
            ),
            (
                f"@{rate:.0f}/s decision p99 server ms (vs /healthz)",
                common.quantile(server_decisions, 0.99),
                common.quantile(server_health, 0.99),
                "p99 < 5 ms, within 2x of /healthz",
            ),
            (f"@{rate:.0f}/s decisions/s achieved (vs offered)", achieved, rate, "the offered rate"),
        ]
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", metavar="DATABASE_URL")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=10.0)
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.port)
    else:
        rows = main(options.seconds)
        for figure, ours, baseline, goal in rows:
            print(f"{figure:<44} {ours:>10.2f} {baseline:>10.2f}  {goal}")
