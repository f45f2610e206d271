"""The test MCP servers in tests/servers, run over HTTP on 127.0.0.1 with a kernel-chosen port."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from support.processes import Process

SERVERS = Path(__file__).resolve().parent.parent / "servers"


def server_command(script: str, *args: str) -> list[str]:
    """The argv that runs one of the test servers with this interpreter (also how stdio targets run them)."""
    return [sys.executable, str(SERVERS / script), *args]


def http_server_command(script: str, *args: str, transport: str = "http") -> list[str]:
    """The argv that runs a test server over HTTP (or SSE) on 127.0.0.1, on a port the kernel picks."""
    return [*server_command(script, *args), "--transport", transport, "--port", "0"]


@contextmanager
def http_server(script: str, *args: str, transport: str = "http") -> Iterator[str]:
    """Run a test server (fastmcp_server.py, hostile_server.py) over HTTP; yields its URL once it listens.

    Its stderr is inherited, so pytest shows it when a test fails.
    """
    with http_server_process(script, *args, transport=transport) as (url, _):
        yield url


@contextmanager
def http_server_process(
    script: str, *args: str, transport: str = "http"
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`http_server`, also yielding the process, for tests that signal or kill it mid-session."""
    with Process(http_server_command(script, *args, transport=transport), stderr_to_stdout=False) as server:
        (url,) = server.ready()
        yield url, server.process


@contextmanager
def faulty_http() -> Iterator[tuple[str, str]]:
    """faulty_server.py's HTTP modes: (base URL, each mode at `<base>/<mode>/mcp`; the URL of a port
    that accepts connections and never answers)."""
    with Process(server_command("faulty_server.py", "http"), stderr_to_stdout=False) as server:
        base, silent = server.ready()
        yield base, silent


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def refused_url() -> str:
    """An MCP URL on 127.0.0.1 where nothing listens: connecting is refused."""
    return f"http://127.0.0.1:{free_port()}/mcp"


class HeldConnections:
    """A port on 127.0.0.1 that accepts connections and holds each one, unanswered, until `release()`
    closes them all. A test releases it on an event (say, other servers recorded), so "those did not
    wait for this one" is proven by order, not by a deadline a busy machine might miss."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._released = threading.Event()
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}/mcp"

    def _accept(self) -> None:
        while not self._released.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._released.is_set():
                    connection.close()
                    return
                self._held.append(connection)

    def release(self) -> None:
        with self._lock:
            self._released.set()
            for connection in self._held:
                connection.close()
            self._held.clear()

    def close(self) -> None:
        self.release()
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        self._thread.join(timeout=5)


@contextmanager
def held_connections() -> Iterator[HeldConnections]:
    held = HeldConnections()
    try:
        yield held
    finally:
        held.close()
