"""Helpers for tests that run real MCP servers: HTTP server subprocesses and leaked-process checks."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SERVERS = Path(__file__).resolve().parent / "servers"
READY_TIMEOUT = 20.0


def server_command(script: str, *args: str) -> list[str]:
    """The argv that runs one of the test servers with this interpreter."""
    return [sys.executable, str(SERVERS / script), *args]


@contextmanager
def http_server(script: str, *args: str, transport: str = "http") -> Iterator[str]:
    """Run a test server on 127.0.0.1 with a kernel-chosen port; yields its URL once it is listening.

    The server's stdout is read by a thread for the whole run, so its READY line can be waited
    for without sleeping and later output can never fill the pipe. stderr is inherited, so
    pytest shows it when a test fails.
    """
    with http_server_process(script, *args, transport=transport) as (url, _):
        yield url


@contextmanager
def http_server_process(
    script: str, *args: str, transport: str = "http"
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`http_server`, also yielding the process, for tests that signal or kill it mid-session."""
    command = [*server_command(script, *args), "--transport", transport, "--port", "0"]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    try:
        yield _wait_ready(process), process
    finally:
        process.kill()
        process.wait()


def _wait_ready(process: subprocess.Popen[str]) -> str:
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"server printed no READY line within {READY_TIMEOUT} s") from None
        if line is None:
            raise RuntimeError(f"server exited with status {process.wait()} before it was ready")
        if line.startswith("READY "):
            return line.split()[1]


def child_processes() -> dict[int, str]:
    """This process's children as pid -> state letter ("Z" for a zombie), read from /proc.

    The SDK spawns stdio servers through anyio/asyncio, which `multiprocessing` never sees;
    /proc sees every child, reaped or not.
    """
    me = os.getpid()
    children: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # The command name is parenthesized and may contain anything, so parse after its last ")".
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(ppid) == me:
            children[int(entry.name)] = state
    return children
