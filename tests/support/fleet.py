"""The benchmark fleet (bench/fleet_server.py): many MCPServer apps, each on its own 127.0.0.1 port,
in one process. Used by the scale tests and the benchmarks alike."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support.processes import Process

FLEET_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "fleet_server.py"
FLEET_READY_TIMEOUT = 120.0
"""A thousand apps take a while to build on a busy machine; the wait ends at the READY line."""


@dataclass
class Fleet:
    process: Process
    urls: list[str]
    """One Streamable HTTP URL per server, in order."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """User + system CPU the fleet process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def fleet(servers: int, tools: int) -> Iterator[Fleet]:
    """Run the fleet; yields once its READY line lists every URL, and stops it afterwards.

    Its stdin is a pipe: the fleet exits when that closes, so it cannot outlive whoever started it.
    """
    argv = [sys.executable, str(FLEET_SCRIPT), "--servers", str(servers), "--tools", str(tools)]
    with Process(argv, stdin=subprocess.PIPE, stderr_to_stdout=False) as process:
        urls = process.ready(FLEET_READY_TIMEOUT)
        if len(urls) != servers:
            raise RuntimeError(f"the fleet announced {len(urls)} URLs, expected {servers}")
        yield Fleet(process, urls)


RAW_FLEET_SCRIPT = FLEET_SCRIPT.with_name("raw_fleet.py")


@contextmanager
def raw_fleet(servers: int, tools: int = 5) -> Iterator[Fleet]:
    """bench/raw_fleet.py: servers answering a poll's requests with plain JSON from prebuilt bytes,
    keeping connections alive (the SDK servers answer with SSE streams, which end each connection)."""
    argv = [sys.executable, str(RAW_FLEET_SCRIPT), "--servers", str(servers), "--tools", str(tools)]
    with Process(argv, stdin=subprocess.PIPE, stderr_to_stdout=False) as process:
        urls = process.ready(FLEET_READY_TIMEOUT)
        yield Fleet(process, urls)
