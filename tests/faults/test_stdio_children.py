"""A stdio server's children end with its poll: a child that keeps the pipes open used to outlive it.

The SDK kills the server's whole process group only when the server outlives its grace after stdin
closes. A server that exits at once, leaving a child that holds its stdout and stderr, left that
child running after every poll (one leaked process a poll). hostile_server.py's `grandchild` mode
is such a server, run for real over stdio; its child writes its pid to a file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import server_command, wait_until

from monitor.collect.client import Limits, Target, fetch_listing


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, killed and waiting to be reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.fixture
def pid_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "grandchild.pid"
    yield path
    if path.exists():  # whatever the test found, the child it started is stopped
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(path.read_text()), signal.SIGKILL)


def test_a_child_holding_the_pipes_does_not_outlive_the_poll(pid_file: Path) -> None:
    command, *args = server_command("hostile_server.py", "grandchild", "--pid-file", str(pid_file))
    target = Target(name="parent", transport="stdio", command=command, args=args)
    listing = asyncio.run(fetch_listing(target, Limits(timeout=60)))
    assert [tool["name"] for tool in listing.tools] == ["echo", "add"]
    grandchild = int(pid_file.read_text())
    # Stopped before the poll returned; reaping the orphan is its new parent's, so wait for that.
    wait_until("the server's child to be gone", lambda: not running(grandchild))
