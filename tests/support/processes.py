"""Processes a test starts: awaited by their output, stopped and reaped whatever happens, never leaked.

Every subprocess the suite or a benchmark runs (test MCP servers, the fleet, `drift-monitor serve`)
prints `READY ...` once it can be used. A thread pumps its stdout into a queue for the whole run,
so that line is awaited without sleeping and later output can never fill the pipe.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

READY_TIMEOUT = 60.0
"""Upper bound on a start: a cold interpreter importing the SDK takes a second or two, far more on a
busy machine. The wait ends at the READY line, so a generous bound costs nothing."""
STOP_GRACE = 30.0
"""How long a stopped process may take to exit on its own before it is killed."""
WAIT = 60.0
"""Upper bound on waiting for something a test is owed (a state, a request); every wait ends at its
event, so a busy machine makes a test slower, not red. A test that must tell an event from a timer
sets the timer far beyond this."""


class ProcessError(RuntimeError):
    """A process exited, or stayed silent, before printing the line a test waits for."""


class Process:
    """A subprocess whose stdout a thread pumps into a queue; `stop()` always reaps it.

    With `stderr_to_stdout` (the default) its log lines are kept too, for the test to read or show
    on failure; without, stderr is inherited and pytest shows it when a test fails.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stdin: int | IO[bytes] = subprocess.DEVNULL,
        stderr_to_stdout: bool = True,
    ) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if stderr_to_stdout else None,
            text=True,
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
        self.name = " ".join(Path(arg).name for arg in argv[:4] if arg != sys.executable)
        """What the process is, for messages: its program or script and first arguments."""
        self.lines: list[str] = []
        """Every line printed so far."""
        self._unread: queue.Queue[str | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read, name=f"pump-{self.pid}", daemon=True)
        self._pump.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            self._unread.put(line)
        self._unread.put(None)

    def wait_for(self, prefix: str, timeout: float = READY_TIMEOUT) -> str:
        """The next line starting with `prefix`; lines before it are skipped (and kept in `lines`)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._unread.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise ProcessError(
                    f"{self.name} printed no {prefix!r} line within {timeout:g} s{self.tail()}"
                ) from None
            if line is None:
                self._unread.put(None)  # a later wait meets the end too
                raise ProcessError(f"{self.name} ended its output before a {prefix!r} line{self.tail()}")
            if line.startswith(prefix):
                return line

    def ready(self, timeout: float = READY_TIMEOUT) -> list[str]:
        """The words after `READY` on the process's READY line (its URLs)."""
        return self.wait_for("READY ", timeout).split()[1:]

    def stop(self, sig: int = signal.SIGTERM, grace: float = STOP_GRACE) -> int:
        """Send `sig` (SIGTERM, as an operator would), SIGKILL after `grace` seconds; returns the exit code.

        The process is reaped either way, and its output read to the end, so `output()` is complete.
        """
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        # A grandchild that inherited the pipe could hold it open: bounded, and the leak check names it.
        self._pump.join(timeout=10)
        if not self._pump.is_alive() and self.process.stdout is not None:
            self.process.stdout.close()  # read to its end: closed here, not left to the collector
        return code

    def kill(self) -> int:
        """SIGKILL, as a crash would: no chance to clean up."""
        return self.stop(signal.SIGKILL)

    def output(self) -> str:
        return "".join(self.lines)

    def tail(self, count: int = 40) -> str:
        """The last lines printed, to explain a failure."""
        return ":\n" + "".join(self.lines[-count:]) if self.lines else ""

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(
    what: str,
    condition: Callable[[], T],
    *,
    timeout: float = WAIT,
    every: float = 0.1,
    alive: Iterable[Process] = (),
) -> T:
    """Check `condition` every `every` seconds until it returns something true, and return that.

    For state that can be read but not awaited (a database, another process's API). Bounded by
    `timeout`; fails at once, with its output, if one of the `alive` processes has exited.
    """
    deadline = time.monotonic() + timeout
    while True:
        for process in alive:
            exited = process.process.poll() is not None
            assert not exited, f"{process.name} exited while waiting for {what}{process.tail()}"
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(every)


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


@contextmanager
def no_leaked_children() -> Iterator[None]:
    """The block leaves no new child process behind (a server outliving its poll or its test), and no
    zombie at all. The body of the `no_leaked_processes` fixture."""
    before = set(child_processes())
    yield
    after = child_processes()
    assert [pid for pid, state in after.items() if state == "Z"] == [], "zombie child processes"
    assert set(after) - before == set(), "child processes left running"
