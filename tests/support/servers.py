"""The test MCP servers in tests/servers, run over HTTP on 127.0.0.1 with a kernel-chosen port."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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
