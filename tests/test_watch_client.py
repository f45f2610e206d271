"""monitor.collect.client.watch_list_changed against the SDK's MCPServer: both eras, stdio and HTTP.

The watch runs in an asyncio task, as `monitor.collect.watch` runs it, and its callbacks run in worker
threads, so the test waits for them on thread-safe queues (from a thread of its own, with a
bound) and never sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from support import child_processes, http_server, http_server_process, numbered_tools, server_command

import monitor.collect.client.watch
from monitor.collect.client import Limits, PollError, Target, fetch_listing, watch_list_changed

LIMITS = Limits(timeout=10.0)
"""Generous for connecting: a cold interpreter importing the SDK takes about a second."""
NOTIFY_WAIT = 5.0
"""Bound on waiting for one report; they take tens of milliseconds (the server polls its file every 50)."""
SILENCE = 1.5
"""How long a change must go unreported to count as silent: thirty times the usual latency."""
END_WAIT = 15.0
"""Bound on a watch task finishing: a stdio server that ignores stdin EOF costs the SDK ~4 s to stop."""
ERAS = ["handshake", "modern"]
TRANSPORTS = ["stdio", "http"]


def edit(path: Path, count: int) -> float:
    """Rewrite the tools file with `count` tools (a new size, so the server sees it); returns when."""
    path.write_text(json.dumps(numbered_tools(count)), encoding="utf-8")
    return time.perf_counter()


pytestmark = pytest.mark.usefixtures("no_leaked_processes")
"""Every test leaves no new child process behind, and no zombie at all."""


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(numbered_tools(1)), encoding="utf-8")
    return path


class Recorder:
    """The watch's callbacks: each call is queued with its time and thread, for the test to await."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[str, float]] = queue.Queue()
        self.threads: set[int] = set()

    def on_ready(self) -> None:
        self._record("ready")

    def on_change(self) -> None:
        self._record("change")

    def _record(self, what: str) -> None:
        self.threads.add(threading.get_ident())
        self.calls.put((what, time.perf_counter()))

    async def next(self, within: float) -> tuple[str, float] | None:
        """The next call, or None if none came within `within` seconds; waited for in a worker thread."""
        try:
            return await anyio.to_thread.run_sync(functools.partial(self.calls.get, timeout=within))
        except queue.Empty:
            return None

    async def ready(self) -> None:
        call = await self.next(LIMITS.timeout)
        assert call is not None, "on_ready was not called"
        assert call[0] == "ready"

    async def change_after(self, path: Path, count: int) -> float:
        """Rewrite the tools file; returns the seconds from the write to on_change."""
        written = edit(path, count)
        call = await self.next(NOTIFY_WAIT)
        assert call is not None, f"no on_change within {NOTIFY_WAIT} s of the write"
        assert call[0] == "change"
        return call[1] - written


def watch(target: Target, recorder: Recorder, limits: Limits = LIMITS) -> asyncio.Task[None]:
    return asyncio.create_task(
        watch_list_changed(target, limits, on_ready=recorder.on_ready, on_change=recorder.on_change)
    )


async def cancel(task: asyncio.Task[None]) -> None:
    """Cancel a watch that is still running, as `WatchManager` does, and wait (bounded) for it to end."""
    assert not task.done(), task.exception() if task.done() else None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, END_WAIT)


async def ended(task: asyncio.Task[None]) -> None:
    """What a watch ended with; raises its PollError."""
    await asyncio.wait_for(task, END_WAIT)


def stdio_target(script: str, *args: str, era: Any = "handshake") -> Target:
    command, *argv = server_command(script, *args)
    return Target(name=script, transport="stdio", command=command, args=argv, era=era)


def http_target(url: str, era: Any = "handshake") -> Target:
    return Target(name="http", transport="http", url=url, era=era)


@contextmanager
def serving(transport: str, path: Path, mode: str, era: str) -> Iterator[Target]:
    """A target for `fastmcp_server.py` over `transport`; an HTTP server lives for the block."""
    args = (str(path), "--list-changed", mode)
    if transport == "stdio":
        yield stdio_target("fastmcp_server.py", *args, era=era)
    else:
        with http_server("fastmcp_server.py", *args) as url:
            yield http_target(url, era)


def stdio_server_pid(before: set[int]) -> int:
    (pid,) = set(child_processes()) - before
    return pid


# --- notifications reach on_change -------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_change_is_reported(
    tools_file: Path, transport: str, era: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = set(child_processes())
    with serving(transport, tools_file, "notify", era) as target:
        recorder = Recorder()
        task = watch(target, recorder)
        await recorder.ready()
        latencies = [await recorder.change_after(tools_file, count) for count in (2, 3)]
        assert await recorder.next(0.3) is None, "one edit, one report"
        assert threading.get_ident() not in recorder.threads, "callbacks must run in worker threads"
        await cancel(task)
        if transport == "stdio":
            assert set(child_processes()) - before == set(), "the stdio server outlived the watch"
    with capsys.disabled():
        shown = ", ".join(f"{latency * 1000:.0f} ms" for latency in latencies)
        print(f"\n  {transport}/{era}: file write -> on_change: {shown}", end="")


async def test_sse_changes_are_reported(tools_file: Path) -> None:
    args = (str(tools_file), "--list-changed", "notify")
    with http_server("fastmcp_server.py", *args, transport="sse") as url:
        recorder = Recorder()
        task = watch(Target(name="sse", transport="sse", url=url), recorder)
        await recorder.ready()
        await recorder.change_after(tools_file, 2)
        await cancel(task)


async def test_bare_url_on_an_sse_server_falls_back_as_the_poll_does(tools_file: Path) -> None:
    """An imported bare `url` (sse_fallback) that only speaks SSE: the watch session falls back too."""
    args = (str(tools_file), "--list-changed", "notify")
    with http_server("fastmcp_server.py", *args, transport="sse") as url:
        recorder = Recorder()
        task = watch(Target(name="bare", transport="http", url=url, sse_fallback=True), recorder)
        await recorder.ready()
        await recorder.change_after(tools_file, 2)
        await cancel(task)
        strict = watch(Target(name="strict", transport="http", url=url), Recorder())
        with pytest.raises(PollError, match="405"):
            await ended(strict)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_change_without_notification_is_silent(tools_file: Path, transport: str, era: str) -> None:
    """`advertise` claims listChanged and never notifies: the "listing changed silently" case."""
    with serving(transport, tools_file, "advertise", era) as target:
        recorder = Recorder()
        task = watch(target, recorder)
        await recorder.ready()
        edit(tools_file, 2)
        assert await recorder.next(SILENCE) is None
        await cancel(task)


async def test_session_outlives_the_timeout(tools_file: Path) -> None:
    """`limits.timeout` bounds connecting, not the quiet streams that follow (HTTP read timeouts too)."""
    limits = Limits(timeout=1.0)
    with http_server("fastmcp_server.py", str(tools_file), "--list-changed", "notify") as url:
        recorders = {era: Recorder() for era in ERAS}
        tasks = [watch(http_target(url, era), recorder, limits) for era, recorder in recorders.items()]
        for recorder in recorders.values():
            await recorder.ready()
        await anyio.sleep(limits.timeout + 0.5)  # the subject of the test: time passing with nothing to say
        edit(tools_file, 2)
        for recorder in recorders.values():
            call = await recorder.next(NOTIFY_WAIT)
            assert call is not None and call[0] == "change"
        for task in tasks:
            await cancel(task)


# --- callbacks ---------------------------------------------------------------------------------------


async def test_blocking_callbacks_do_not_stall_the_session(tools_file: Path) -> None:
    """on_ready blocks until the test has done I/O on the event loop: only a worker thread allows that."""
    release = threading.Event()
    calls: queue.Queue[str] = queue.Queue()

    def on_ready() -> None:
        calls.put("ready")
        assert release.wait(NOTIFY_WAIT)

    def on_change() -> None:
        calls.put("change")

    async def next_call() -> str:
        return await anyio.to_thread.run_sync(functools.partial(calls.get, timeout=LIMITS.timeout))

    with serving("http", tools_file, "notify", "handshake") as target:
        task = asyncio.create_task(watch_list_changed(target, LIMITS, on_ready=on_ready, on_change=on_change))
        assert await next_call() == "ready"
        edit(tools_file, 2)
        # A whole poll while on_ready blocks; the notification most likely arrives meanwhile, and
        # one that comes during a callback is reported after it.
        assert len((await fetch_listing(target, LIMITS)).tools) == 2
        release.set()
        assert await next_call() == "change"
        await cancel(task)


@pytest.mark.parametrize("era", ERAS)
async def test_callback_exception_propagates_and_stops_the_server(tools_file: Path, era: str) -> None:
    def on_change() -> None:
        raise RuntimeError("database is locked")

    before = set(child_processes())
    with serving("stdio", tools_file, "notify", era) as target:
        ready = threading.Event()
        task = asyncio.create_task(
            watch_list_changed(target, LIMITS, on_ready=ready.set, on_change=on_change)
        )
        assert await anyio.to_thread.run_sync(ready.wait, LIMITS.timeout)
        edit(tools_file, 2)
        with pytest.raises(RuntimeError, match="database is locked"):
            await ended(task)
    assert set(child_processes()) - before == set()


# --- how sessions end --------------------------------------------------------------------------------


async def test_dead_url_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    recorder = Recorder()
    with pytest.raises(PollError) as caught:
        await watch_list_changed(
            http_target(url),
            Limits(timeout=5.0),
            on_ready=recorder.on_ready,
            on_change=recorder.on_change,
        )
    assert (caught.value.kind, caught.value.message) == ("connect", f"connection refused to {url}")
    assert recorder.calls.empty()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_modern_server_without_listen(tools_file: Path, transport: str) -> None:
    with serving(transport, tools_file, "off", "modern") as target:
        recorder = Recorder()
        with pytest.raises(PollError) as caught:
            await ended(watch(target, recorder))
    assert caught.value.kind == "protocol"
    assert "does not support subscriptions/listen" in caught.value.message
    assert recorder.calls.empty()


async def test_eras_fall_back_as_fetch_listing_does() -> None:
    """Asked for 2026-07-28, a handshake-only server gets a handshake session; the reverse gets listen."""
    recorder = Recorder()
    task = watch(stdio_target("hostile_server.py", "legacy-only", era="modern"), recorder)
    await recorder.ready()
    await cancel(task)

    with pytest.raises(PollError) as caught:
        await ended(watch(stdio_target("hostile_server.py", "modern-only"), Recorder()))
    # It negotiated 2026-07-28, then asked for the listen stream this hand-rolled server lacks.
    assert caught.value.kind == "protocol"
    assert "does not support subscriptions/listen (JSON-RPC error -32601" in caught.value.message


async def test_http_server_without_session_cannot_notify() -> None:
    """Handshake-era notifications ride the GET stream, which the SDK opens only for a session."""
    with http_server("hostile_server.py", "legacy-only") as url, pytest.raises(PollError) as caught:
        await ended(watch(http_target(url), Recorder()))
    assert caught.value.kind == "protocol"
    assert "no Mcp-Session-Id" in caught.value.message


@pytest.mark.parametrize("era", ERAS)
async def test_stdio_server_exit_is_process_exit(tools_file: Path, era: str) -> None:
    before = set(child_processes())
    with serving("stdio", tools_file, "notify", era) as target:
        recorder = Recorder()
        task = watch(target, recorder)
        await recorder.ready()
        os.kill(stdio_server_pid(before), signal.SIGKILL)
        with pytest.raises(PollError) as caught:
            await ended(task)
    assert (caught.value.kind, caught.value.message) == (
        "process-exit",
        "server process exited during the watch session",
    )


@pytest.mark.parametrize("era", ERAS)
async def test_http_server_killed_is_connect_error(tools_file: Path, era: str) -> None:
    args = (str(tools_file), "--list-changed", "notify")
    with http_server_process("fastmcp_server.py", *args) as (url, process):
        recorder = Recorder()
        task = watch(http_target(url, era), recorder)
        await recorder.ready()
        process.kill()
        with pytest.raises(PollError) as caught:
            await ended(task)
    assert caught.value.kind == "connect"
    stream = "notification stream (GET)" if era == "handshake" else "subscriptions/listen stream"
    assert stream in caught.value.message and "dropped" in caught.value.message


async def test_sse_server_killed_is_connect_error(tools_file: Path) -> None:
    args = (str(tools_file), "--list-changed", "notify")
    with http_server_process("fastmcp_server.py", *args, transport="sse") as (url, process):
        recorder = Recorder()
        task = watch(Target(name="sse", transport="sse", url=url), recorder)
        await recorder.ready()
        process.kill()
        with pytest.raises(PollError) as caught:
            await ended(task)
    assert caught.value.kind == "connect", caught.value


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_modern_graceful_close_returns(tools_file: Path, transport: str) -> None:
    """SIGUSR1 makes the test server end its listen streams with their final result."""
    before = set(child_processes())
    args = (str(tools_file), "--list-changed", "notify")
    recorder = Recorder()
    if transport == "stdio":
        task = watch(stdio_target("fastmcp_server.py", *args, era="modern"), recorder)
        await recorder.ready()
        os.kill(stdio_server_pid(before), signal.SIGUSR1)
        await ended(task)
    else:
        with http_server_process("fastmcp_server.py", *args) as (url, process):
            task = watch(http_target(url, "modern"), recorder)
            await recorder.ready()
            process.send_signal(signal.SIGUSR1)
            await ended(task)
    assert recorder.calls.empty()


async def test_handshake_http_graceful_close_returns(tools_file: Path) -> None:
    """Shutting down in order (SIGTERM), the server ends its GET stream cleanly."""
    with http_server_process("fastmcp_server.py", str(tools_file), "--list-changed", "notify") as (
        url,
        process,
    ):
        recorder = Recorder()
        task = watch(http_target(url), recorder)
        await recorder.ready()
        process.terminate()
        await ended(task)


@pytest.mark.parametrize("era", ERAS)
async def test_keep_alive_finds_a_hung_server(
    tools_file: Path, era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped server keeps its connections open; only a request that goes unanswered shows it."""
    monkeypatch.setattr(monitor.collect.client.watch, "KEEPALIVE_INTERVAL", 0.2)
    limits = Limits(timeout=1.0)
    args = (str(tools_file), "--list-changed", "notify")
    with http_server_process("fastmcp_server.py", *args) as (url, process):
        recorder = Recorder()
        task = watch(http_target(url, era), recorder, limits)
        await recorder.ready()
        process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(PollError) as caught:
                await ended(task)
        finally:
            process.send_signal(signal.SIGCONT)
    assert caught.value.kind == "timeout"
    assert "keep-alive" in caught.value.message
