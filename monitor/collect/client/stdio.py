"""stdio plumbing: what a server wrote to stderr, noticing that its output ended, and stopping
every process it started."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, Self, TextIO

import anyio
import mcp.client.stdio as sdk_stdio
from anyio.abc import Process
from mcp.client._transport import ReadStream
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

STDERR_TAIL_BYTES = 2048
"""How much of a stdio server's stderr is kept to explain its failure."""

_STDERR_EOF_WAIT = 0.5
"""Once the server is stopped, how long to wait for the rest of its stderr (a child may hold the pipe)."""


GROUP_STOP_TIMEOUT = 2.0
"""After the server is stopped, how long what is left of its process group gets between SIGTERM and
SIGKILL (the SDK's own grace for the server)."""

_SPAWNED: ContextVar[list[Any] | None] = ContextVar("drift_monitor_stdio_spawned", default=None)
"""The processes the SDK's stdio transport spawned inside `server_group`, for this task."""

_sdk_spawn = sdk_stdio._create_platform_compatible_process


async def _noted_spawn(*args: Any, **kwargs: Any) -> Any:
    """The SDK's spawn (a new session and process group on POSIX), noting the process for
    `server_group`. The SDK keeps the process to itself; this is the one place it can be seen."""
    process = await _sdk_spawn(*args, **kwargs)
    spawned = _SPAWNED.get()
    if spawned is not None:
        spawned.append(process)
    return process


sdk_stdio._create_platform_compatible_process = _noted_spawn


@contextmanager
def server_group() -> Iterator[list[Any]]:
    """Note the stdio server process spawned in this block (see `stop_server_group`)."""
    spawned: list[Any] = []
    token = _SPAWNED.set(spawned)
    try:
        yield spawned
    finally:
        _SPAWNED.reset(token)


async def stop_server_group(spawned: list[Any]) -> None:
    """Stop whatever is left of each server's process group once its transport has closed.

    The SDK kills the whole group only when the server outlives its grace after stdin closes; a
    server that exits at once leaves its children running, and a child that holds the pipes open
    outlived every poll (one leaked process a poll). The server is spawned as the leader of a
    group of its own, so its pid names the group: SIGTERM, then SIGKILL after
    `GROUP_STOP_TIMEOUT` (the SDK's `terminate_posix_process_tree`); a group already gone costs
    one failed `killpg`. A child that left the group on purpose (a daemon) escapes, as from the SDK.
    """
    if sys.platform == "win32":  # the SDK's job object ends the whole tree there
        return
    with anyio.CancelScope(shield=True):
        for process in spawned:
            if isinstance(process, Process):
                await terminate_posix_process_tree(process, GROUP_STOP_TIMEOUT)


class StderrTail:
    """The last bytes a stdio server wrote to stderr, drained as they come so a chatty server never
    blocks on a full pipe and memory stays bounded however much it writes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._tail = b""
        self._truncated = False
        self._eof = anyio.Event()
        self._reading = anyio.CancelScope(shield=True)
        """Shielded: the poll's deadline must not stop the reading before the server has been stopped."""

    @asynccontextmanager
    async def capture(self) -> AsyncIterator[TextIO]:
        """A writable stderr for the server; on exit, waits briefly for the rest of what it wrote."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        writer = os.fdopen(write_fd, "w")
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._drain, read_fd)
                try:
                    yield writer
                finally:
                    writer.close()
                    with anyio.move_on_after(_STDERR_EOF_WAIT, shield=True):
                        await self._eof.wait()
                    self._reading.cancel()
        finally:
            os.close(read_fd)

    async def _drain(self, fd: int) -> None:
        with self._reading:
            while True:
                await anyio.wait_readable(fd)
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    self._eof.set()
                    return
                tail = self._tail + chunk
                self._truncated |= len(tail) > self._limit
                self._tail = tail[-self._limit :]

    def text(self) -> str:
        """The kept lines, joined into one line; a line cut by the limit is dropped."""
        lines = self._tail.decode("utf-8", "replace").splitlines()
        if self._truncated and lines:
            lines = lines[1:]
        return " | ".join(line.strip() for line in lines if line.strip())


class EndNoticed:
    """A transport's read stream that reports its end: how a session learns its stdio server exited
    (a watch session also learns this way that an SSE server closed its stream)."""

    def __init__(self, stream: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        """The sender's contextvars, which the dispatcher looks for on the stream it reads."""
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._stream.receive()
        except anyio.EndOfStream:
            self._on_end()
            raise

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class ResultsSeen(EndNoticed):
    """A transport's read stream that shows each message to `on_message` as the session reads it."""

    def __init__(
        self,
        stream: ReadStream[SessionMessage | Exception],
        on_message: Callable[[SessionMessage | Exception], None],
    ) -> None:
        super().__init__(stream, lambda: None)
        self._on_message = on_message

    async def receive(self) -> SessionMessage | Exception:
        message = await super().receive()
        self._on_message(message)
        return message
