"""The SDK's Streamable HTTP transport as a one-shot poll needs it: no notification stream, JSON parsed once.

`streamable_http_client` opens the GET notification stream as soon as `notifications/initialized`
is sent. A poll reads one listing and ends the session, so it never waits for a notification,
yet that stream costs every poll one more request and, for servers that end it (stateful
servers answering 405 and closing), one more TCP connection. `poll_transport` runs the same
`StreamableHTTPTransport` (every POST, header, session id, redirect rule, SSE answer and DELETE as
the SDK does them) with the GET stream left out. A watch session, which lives on notifications,
keeps `streamable_http_client`.

A plain JSON answer (`{"jsonrpc": "2.0", "id": ..., "result": {...}}`, the common case) is parsed
once by pydantic-core's JSON parser, the one the SDK's `validate_json` uses, and handed on as the
`JSONRPCResponse` it describes. Anything else (an error, a message of another shape, JSON the
parser refuses) goes through the SDK's own parsing and error answers.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pydantic_core
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import StreamableHTTPTransport, StreamWriter
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCResponse, RequestId

_RESPONSE_KEYS = {"jsonrpc", "id", "result"}


def plain_response(content: bytes) -> JSONRPCResponse | None:
    """The JSON-RPC response `content` holds when it is exactly one with a result object, else None.

    Built without a second pass over the result: what `jsonrpc_message_adapter` checks of such a
    message (`"2.0"`, an integer or string id, a result object) is checked here, and the result's
    content is the SDK session's to validate against the negotiated version, as it is either way.
    """
    try:
        parsed: Any = pydantic_core.from_json(content)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.keys() != _RESPONSE_KEYS or parsed["jsonrpc"] != "2.0":
        return None
    ident, result = parsed["id"], parsed["result"]
    if type(ident) not in (int, str) or type(result) is not dict:
        return None
    return JSONRPCResponse.model_construct(jsonrpc="2.0", id=ident, result=result)


class PollTransport(StreamableHTTPTransport):
    """`StreamableHTTPTransport` with JSON answers parsed once (see `plain_response`)."""

    async def _handle_json_response(
        self,
        response: httpx2.Response,
        read_stream_writer: StreamWriter,
        *,
        request_id: RequestId,
    ) -> None:
        try:
            content = await response.aread()
        except httpx2.StreamError as exc:  # as the SDK answers a body that could not be read
            error = ErrorData(code=PARSE_ERROR, message=f"Failed to parse JSON response: {exc}")
            await read_stream_writer.send(
                SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
            )
            return
        message = plain_response(content)
        if message is None:
            await super()._handle_json_response(response, read_stream_writer, request_id=request_id)
            return
        await read_stream_writer.send(SessionMessage(message))


@asynccontextmanager
async def poll_transport(
    url: str, *, http_client: httpx2.AsyncClient, max_sse_event_size: int
) -> AsyncGenerator[TransportStreams, None]:
    """`streamable_http_client(url, http_client=...)` without the GET notification stream.

    Ends the session with DELETE, as the SDK does; the client stays open (it is the caller's).
    """
    transport = PollTransport(url, max_sse_event_size=max_sse_event_size)
    read_stream_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_stream_reader = create_context_streams[SessionMessage](0)
    async with (
        read_stream_writer,
        read_stream,
        write_stream,
        write_stream_reader,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(
            transport.post_writer,
            http_client,
            write_stream_reader,
            read_stream_writer,
            write_stream,
            _no_notification_stream,
            tg,
        )
        try:
            yield read_stream, write_stream
        finally:
            if transport.session_id:
                await transport.terminate_session(http_client)
            tg.cancel_scope.cancel()


def _no_notification_stream() -> None:
    """What the transport calls once `notifications/initialized` is sent: a poll opens no GET stream."""
