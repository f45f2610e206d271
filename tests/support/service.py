"""`drift-monitor serve` as deployed: a real subprocess, migrated first through the command line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from support.processes import READY_TIMEOUT, Process


def cli(*args: str) -> list[str]:
    """The argv of a `drift-monitor` command run with this interpreter."""
    return [sys.executable, "-m", "monitor.cli", *args]


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """A `drift-monitor` command run to its end (at most 120 s), its output kept; the exit code is the
    caller's to check."""
    return subprocess.run(
        cli(*args),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=None if env is None else dict(env),
        input=stdin,
    )


def migrate_config(config: Path, env: Mapping[str, str]) -> None:
    """`drift-monitor migrate --config CONFIG`, which must succeed."""
    result = subprocess.run(
        cli("migrate", "--config", str(config)),
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


class Service(Process):
    """A `drift-monitor serve --port 0` subprocess; its stdout and stderr (the logs) are kept.

    Starting does not wait: several instances can be started at once, then each `wait_ready()`.
    """

    def __init__(self, config: Path, env: Mapping[str, str]) -> None:
        super().__init__(cli("serve", "--config", str(config), "--port", "0"), env=env)
        self.url = ""
        """The dashboard's base URL, once `wait_ready()` has returned."""

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> str:
        (self.url,) = self.ready(timeout)
        return self.url


@contextmanager
def serving(config: Path, env: Mapping[str, str]) -> Iterator[Service]:
    """A started and ready `serve`, stopped with SIGTERM (SIGKILL if it hangs) when the block ends."""
    with Service(config, env) as service:
        service.wait_ready()
        yield service
