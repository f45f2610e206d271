"""Shared by the fault-injection tests: the healthy listing, server processes, a closed port."""

from __future__ import annotations

import queue
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

FAULTS = Path(__file__).resolve().parent
SERVERS_SCRIPT = FAULTS / "servers.py"
READY_TIMEOUT = 20.0
HEALTHY_TOOLS: list[dict[str, Any]] = [
    {
        "name": "search",
        "description": "Search the runbooks.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
    {"name": "page", "description": "Page the on-call engineer.", "inputSchema": {"type": "object"}},
    {"name": "ack", "description": "Acknowledge a page.", "inputSchema": {"type": "object"}},
]


class ReadyProcess:
    """A server subprocess whose stdout is drained by a thread; `line` is its READY line."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.line = self._ready()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _ready(self) -> list[str]:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise RuntimeError(
                    f"{self.process.args!r} printed no READY line in {READY_TIMEOUT} s"
                ) from None
            if line is None:
                raise RuntimeError(f"{self.process.args!r} exited with {self.process.wait()} before READY")
            if line.startswith("READY "):
                return line.split()[1:]

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (the port was just free)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"
