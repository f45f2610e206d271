"""A traced poll's MCP messages as spans (`monitor.tracing`), from the session down to the wire.

`TracedSession` opens a CLIENT span around each request and notification the poll sends; the
message is stamped as it is written (its request id on the span, the span's context in
`params._meta`, `tracing.outgoing`): on stdio and SSE by `TracedWrites`, the write stream the SDK's
dispatcher writes to, and on a Streamable HTTP poll by `PollDispatcher`, which builds its messages
itself. So every transport is traced once, the same way. A session outside a traced poll (tracing
off, a watch session) is a plain `ProfileSession` on the transport's own stream.

Adding `traceparent` to `params._meta` changes no listing: the fingerprint and the digest are of
the server's answers, and no request is stored. Servers that do not know the keys ignore them, as
every revision's `_meta` allows (MCP SEP-414 names them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TypeVar

import mcp_types as types
from mcp.client._transport import WriteStream
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from pydantic import BaseModel, RootModel, TypeAdapter

from monitor import tracing
from monitor.collect.client.errors import clip, scrubbed
from monitor.collect.client.negotiation import ProfileSession
from monitor.collect.client.target import Target

ResultT = TypeVar("ResultT", bound=BaseModel)


def session_tracing(target: Target) -> tracing.McpClient | None:
    """The tracing of a session with `target`: None unless it belongs to a traced poll. What a span
    says of a failure is scrubbed as a poll's error is: a hostile server may echo a header's secret."""
    return tracing.client(
        target.transport, target.url, target.client.view, lambda text: clip(scrubbed(text, target))
    )


@contextmanager
def _sent(traced: tracing.McpClient, method: str, version: str | None = None) -> Iterator[None]:
    with traced.message(method, version) as span:
        try:
            yield
        except MCPError as exc:
            span.rpc_error(exc.error.code, exc.error.message)
            raise


class TracedSession(ProfileSession):
    """A `ProfileSession` whose every request and notification is a span of the poll's trace."""

    def __init__(self, traced: tracing.McpClient, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.traced = traced

    async def send_request(
        self,
        request: types.ClientRequest | types.Request[Any, Any],
        result_type: type[ResultT] | TypeAdapter[ResultT],
        request_read_timeout_seconds: float | None = None,
        metadata: ClientMessageMetadata | None = None,
        progress_callback: ProgressFnT | None = None,
    ) -> ResultT:
        with _sent(self.traced, request.method):
            result = await super().send_request(
                request, result_type, request_read_timeout_seconds, metadata, progress_callback
            )
            if isinstance(request, types.InitializeRequest) and (chosen := _chosen(result)) is not None:
                self.traced.negotiated(chosen)  # on the initialize span too: it is the version it chose
            return result

    async def send_discover(self, version: str) -> dict[str, Any]:
        with _sent(self.traced, "server/discover", version):
            return await super().send_discover(version)

    async def send_notification(self, notification: types.ClientNotification) -> None:
        with _sent(self.traced, notification.method):
            await super().send_notification(notification)

    def adopt(self, result: types.InitializeResult | types.DiscoverResult) -> None:
        super().adopt(result)
        if self.protocol_version is not None:
            self.traced.negotiated(self.protocol_version)


def _chosen(result: object) -> str | None:
    """The protocol version an initialize result names, as the poll reads it (a `Raw` dict) or typed."""
    raw = result.root if isinstance(result, RootModel) else None
    if isinstance(raw, dict):
        version = raw.get("protocolVersion")
    else:
        version = getattr(result, "protocol_version", None)
    return version if isinstance(version, str) else None


class TracedWrites:
    """A stdio or SSE transport's write stream, stamping each request and notification as it is written
    (in the sender's context: the SDK's dispatcher writes from the task that awaits the request)."""

    def __init__(self, stream: WriteStream[SessionMessage]) -> None:
        self._stream = stream

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
            ident = message.id if isinstance(message, types.JSONRPCRequest) else None
            stamped = tracing.outgoing(message.params, ident)
            if stamped is not None and stamped is not message.params:  # untouched: left unset as it was
                message.params = dict(stamped)
        await self._stream.send(item)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> TracedWrites:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
