"""stdio plumbing: what a server wrote to stderr, and noticing that its output ended."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Self, TextIO

import anyio
from mcp.client._transport import ReadStream
from mcp.shared.message import SessionMessage

STDERR_TAIL_BYTES = 2048
"""How much of a stdio server's stderr is kept to explain its failure."""

_STDERR_EOF_WAIT = 0.5
"""Once the server is stopped, how long to wait for the rest of its stderr (a child may hold the pipe)."""


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
