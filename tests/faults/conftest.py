"""Fixtures for the fault-injection suite: the faulty and healthy servers it polls, and leak checks."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults.faults_harness import HEALTHY_TOOLS, SERVERS_SCRIPT, ReadyProcess
from helpers import child_processes, http_server


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Every test leaves no new child process behind (a stdio server outliving its poll), and no zombie."""
    before = set(child_processes())
    yield
    after = child_processes()
    assert [pid for pid, state in after.items() if state == "Z"] == []
    assert set(after) - before == set()


@pytest.fixture(scope="module")
def faulty_http() -> Iterator[tuple[str, str]]:
    """(base URL of the HTTP modes of servers.py, URL of its accept-and-never-answer port)."""
    server = ReadyProcess([sys.executable, str(SERVERS_SCRIPT), "http"])
    try:
        base, silent = server.line
        yield base, silent
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tools_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("healthy") / "tools.json"
    path.write_text(json.dumps(HEALTHY_TOOLS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def healthy_http(tools_file: Path) -> Iterator[str]:
    """A real MCPServer over Streamable HTTP, serving HEALTHY_TOOLS two to a page."""
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "2") as url:
        yield url
