"""What a hook answer costs `serve` in CPU, beside the floor: a plain ASGI app doing the same lookup.

Goal (issue 41): CPU per Claude Code hook answer within 3x of a plain ASGI app answering the same
requests under the same uvicorn and httptools in the same run.

- **serve**: `monitor.service.serve` (`bench_hook_burst.serve_app`) over `bench_decisions`' 100
  servers of 20 tools (fresh listings, every tenth server with a flipped tool, whose hook calls are
  denied and kept for review), answering on its main port and, from its decision process, on
  `[decisions] listen`.
- **floor**: an ASGI callable served by the same uvicorn with httptools that reads the body, parses it
  with the standard library's JSON, looks `tool_name` up in a dict holding every tool's answer and
  writes that answer: what any hook endpoint must do at the least.

The caller sends `bench_decisions`' Claude Code hook mix (95% approved tools, 5% flipped ones) over
8 and over 64 kept-alive connections, each connection sending its next request when the previous one
is answered (closed loop, as many hook processes with kept-alive connections would), and checks
every answer. Each case runs the requests three times and measures the third run: the first ones
register the 50 host sessions with each of the 100 servers and build each process's views (a
decision port's connections may all go to one of its processes in one run, to the other in the next;
a session beats again after 30 s, so the measured run writes only the kept denies). It reports the
answers per second and the app's CPU per answer (every process of it, from /proc: for serve, the
main process and its decision processes), and each row's ratio to the floor's.

    python bench/bench_decision_cpu.py [--requests 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common
from bench_decisions import HOST, NO_OPINION, SERVERS, TOOLS, Call, calls, read_response
from bench_hook_burst import app_process

CONNECTIONS = (8, 64)


# --- the floor ----------------------------------------------------------------------------------------


def floor_answers() -> dict[str, bytes]:
    """Every tool's answer as the monitor gives it: `{}` (no opinion) or the deny of a flipped tool."""
    deny = json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "read-only-revoked",
            }
        },
        separators=(",", ":"),
    ).encode()
    answers = {}
    for server in range(SERVERS):
        for tool in range(TOOLS):
            flipped = server % 10 == 0 and tool == 0
            answers[f"mcp__s{server:03d}__tool_{tool:02d}"] = deny if flipped else NO_OPINION
    return answers


def serve_floor() -> None:
    """The floor's process: prints `READY <port>`, then serves until terminated."""
    import uvicorn

    from monitor import service

    answers = floor_answers()
    unknown = b'{"decision":"ask"}'

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = answers.get(json.loads(body).get("tool_name"), unknown)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    listener = service._listen(HOST, 0)
    print(f"READY {listener.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, http="httptools", lifespan="on", log_level="warning", access_log=False)
    asyncio.run(uvicorn.Server(config).serve(sockets=[listener]))


@dataclass
class Floor:
    port: int
    pid: int

    def cpu_seconds(self) -> float:
        return common.cpu_seconds(self.pid)


@contextmanager
def floor_process() -> Iterator[Floor]:
    process = subprocess.Popen([sys.executable, __file__, "--floor"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        assert ready[:1] == ["READY"], ready
        yield Floor(int(ready[1]), process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)


# --- the caller ----------------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    connections: int
    answers: int
    errors: int
    seconds: float
    cpu: float

    @property
    def per_second(self) -> float:
        return self.answers / self.seconds

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / max(1, self.answers)


async def closed_loop(port: int, todo: list[Call], connections: int) -> tuple[int, int, float]:
    """Every request of `todo` over `connections` kept-alive connections, each sending its next one
    when the previous one is answered: (answered, errors, seconds)."""
    opened = await asyncio.gather(*(asyncio.open_connection(HOST, port) for _ in range(connections)))
    queue = iter(range(len(todo)))
    answered = errors = 0

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered, errors
        for k in queue:
            writer.write(todo[k].request)
            status, body = await read_response(reader)
            answered += 1
            errors += not todo[k].answered(status, body)

    start = time.perf_counter()
    await asyncio.gather(*(connection(reader, writer) for reader, writer in opened))
    seconds = time.perf_counter() - start
    for _, writer in opened:
        writer.close()
    return answered, errors, seconds


def measure(name: str, port: int, cpu: Any, todo: list[Call], connections: int) -> Row:
    for _ in range(2):  # warm: caches, code paths, the sessions registered, in every decision process
        asyncio.run(closed_loop(port, todo, connections))
    before = cpu()
    answered, errors, seconds = asyncio.run(closed_loop(port, todo, connections))
    return Row(name, connections, answered, errors, seconds, cpu() - before)


def main(argv: list[str] | None = None) -> list[tuple[str, float, float, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args([] if argv is None else argv)
    if args.floor:
        serve_floor()
        return []
    hooks = calls(args.requests)["hook"]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder, floor_process() as floor:
        urls = Path(folder) / "urls"
        urls.write_text("")
        with app_process("now", Path(folder) / "serve.db", urls, 3600.0, None, 2) as app:
            ports = [("floor", floor.port, floor.cpu_seconds)]
            ports.append(("serve, main port", app.port, app.cpu_seconds))
            if app.decision_port:
                ports.append(("serve, decision port", app.decision_port, app.cpu_seconds))
            for connections in CONNECTIONS:
                for name, port, cpu in ports:
                    rows.append(measure(name, port, cpu, hooks, connections))
                    print_row(rows[-1], rows)
    floor_rows = {row.connections: row for row in rows if row.name == "floor"}
    worst = max(row.cpu_ms / floor_rows[row.connections].cpu_ms for row in rows if row.name != "floor")
    return [("hook answer CPU, serve / plain ASGI floor (worst of ports and connections)", worst, 1.0, "< 3")]


def print_row(row: Row, rows: list[Row]) -> None:
    floor = next(r for r in rows if r.name == "floor" and r.connections == row.connections)
    with suppress(ZeroDivisionError):
        print(
            f"{row.name:<22} {row.connections:>3} connections: {row.answers} answers in {row.seconds:5.2f} s "
            f"({row.per_second:6.0f}/s), {row.cpu_ms:6.3f} ms CPU per answer "
            f"({row.cpu_ms / floor.cpu_ms:5.1f}x the floor), errors {row.errors}",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
