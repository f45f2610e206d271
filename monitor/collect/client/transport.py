"""A one-shot poll over Streamable HTTP: the SDK's session and HTTP transport, with one POST per call.

The SDK runs a session on a `Dispatcher`. Its stream-backed one (`JSONRPCDispatcher` over
`streamable_http_client`) is built for a long conversation: memory streams between the session and
the transport, a task group per outgoing message and a task per request, request correlation, an
OpenTelemetry span per request, and a GET stream for server notifications opened as soon as
`notifications/initialized` is sent. A poll asks four things in a row and ends the session, and
that machinery cost about as much CPU as the HTTP itself.

`PollDispatcher` is the SDK's `Dispatcher` protocol for that case: each request is awaited as its
POST, through the SDK's own `StreamableHTTPTransport._handle_post_request` (every header, session
id, protocol-version header, redirect rule, SSE answer, HTTP-error stand-in and resumption as the
SDK does them), and its answer is handed back to the session, which still stamps every request and
checks every result against the negotiated version's schema. No GET stream is opened: a poll never
waits for a notification (a watch session, which lives on them, keeps `streamable_http_client`).

A plain JSON answer (`{"jsonrpc", "id", "result"}`, the common case) is parsed once by
pydantic-core's JSON parser, the one the SDK's `validate_json` uses, and handed on as the
`JSONRPCResponse` it describes. Anything else (an error, a message of another shape, JSON the
parser refuses) goes through the SDK's own parsing and error answers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
import pydantic_core
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport, StreamWriter
from mcp.shared.dispatcher import (
    CallOptions,
    OnNotify,
    OnNotifyIntercept,
    OnRequest,
    coerce_request_id,
    run_notify_intercept,
)
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)

from monitor import tracing
from monitor.collect.client import schema

log = logging.getLogger("drift_monitor.poll")

_RESPONSE_KEYS = {"jsonrpc", "id", "result"}

OTHER_ANSWER = "Response to another request"
"""How an answer that names another request's id is reported (`errors.transport_failure`: protocol).
The SDK's own dispatcher would wait for the right id until the poll's deadline."""
NO_ANSWER = "No answer to"
"""How a POST that brought back no answer at all (only notifications, say) is reported (protocol)."""

Inbound = SessionMessage | Exception
"""What the transport hands on from the server: a message, or what stood where one should be."""


def plain_response(content: bytes | str) -> JSONRPCResponse | None:
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
    """`StreamableHTTPTransport` with answers parsed once, plain JSON or SSE (see `plain_response`)."""

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
        schema.answered(message.result, content)
        await read_stream_writer.send(SessionMessage(message))

    async def _handle_sse_event(
        self,
        sse: httpx2.ServerSentEvent,
        read_stream_writer: StreamWriter,
        original_request_id: RequestId | None = None,
        resumption_callback: Callable[[str], Awaitable[None]] | None = None,
    ) -> bool:
        """An answer sent as an SSE event (as many servers send every answer), parsed once and its
        text noted for the schema check, as a plain JSON answer is; any other event (a notification,
        a request, an error, a priming event) as the SDK handles it."""
        message = plain_response(sse.data) if sse.event == "message" and sse.data else None
        if message is None:
            return await super()._handle_sse_event(
                sse, read_stream_writer, original_request_id, resumption_callback
            )
        if original_request_id is not None:
            message.id = original_request_id
        schema.answered(message.result, sse.data.encode())
        await read_stream_writer.send(SessionMessage(message))
        if sse.id and resumption_callback:
            await resumption_callback(sse.id)
        return True


class _Answers:
    """Where the transport writes what one POST brought back (its `read_stream_writer`).

    The answer to the request is kept; anything the server sent before it on an SSE answer (a
    notification, a request of its own) is handed to the dispatcher as it arrives, as the SDK's
    read loop would.
    """

    def __init__(self, dispatcher: PollDispatcher, request_id: RequestId | None) -> None:
        self._dispatcher = dispatcher
        self._wanted = None if request_id is None else coerce_request_id(request_id)
        self.answer: JSONRPCResponse | JSONRPCError | None = None
        self.other: RequestId | None = None
        """The id of an answer that came for no request in flight (only the first is kept)."""

    async def send(self, item: Inbound) -> None:
        self._dispatcher.on_inbound(item)
        if isinstance(item, Exception):
            return  # `on_inbound` has it: a poll ends on what stood where a message should be
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            ident = message.id
            if self._wanted is not None and ident is not None and coerce_request_id(ident) == self._wanted:
                self.answer = message
            elif self.other is None:
                self.other = ident
            return
        await self._dispatcher.inbound(message)


@dataclass
class _ServerRequestContext:
    """The SDK's `DispatchContext` for a request the server sent on a poll's SSE answer.

    The session answers it (a ping, or a refusal of sampling and elicitation, which a poll does not
    offer); the answer is POSTed back. A poll has nothing to send the server from inside it.
    """

    request_id: RequestId | None
    transport: TransportContext = field(
        default_factory=lambda: TransportContext(kind="streamable-http", can_send_request=False)
    )
    message_metadata: None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)

    @property
    def can_send_request(self) -> bool:
        return False

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        """Nothing reaches the server from inside a request it sent during a poll."""

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """A poll reports no progress."""


class PollDispatcher:
    """The SDK's `Dispatcher` for a poll: every request is its own POST, awaited where it is sent.

    `on_inbound` sees everything the server sends, as parsed, before the session checks it (a poll
    keeps a listing that fails the schema check from there), and what the transport handed on in
    place of a message.
    """

    def __init__(
        self,
        url: str,
        client: httpx2.AsyncClient,
        *,
        max_sse_event_size: int,
        on_inbound: Callable[[Inbound], None],
    ) -> None:
        self.transport = PollTransport(url, max_sse_event_size=max_sse_event_size)
        self.client = client
        self.on_inbound = on_inbound
        self._next_id = 0
        self._on_request: OnRequest | None = None
        self._on_notify: OnNotify | None = None
        self._intercept: OnNotifyIntercept | None = None

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_notify_intercept: OnNotifyIntercept | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hold the session's handlers and return: there is no read loop (answers come back on
        their POSTs), and nothing left running for the session's exit to cancel. A cancelled task
        here left a reference cycle per poll (the `CancelledError`'s traceback holds the frames
        that hold it) with the whole poll and its listing hanging from it, for the garbage
        collector to find: about 500 objects a poll."""
        self._on_request, self._on_notify, self._intercept = on_request, on_notify, on_notify_intercept
        task_status.started()

    def release(self) -> None:
        """Let go of the session's handlers once it has ended: the session holds this dispatcher and
        the handlers hold the session, a cycle only the garbage collector would break."""
        self._on_request = self._on_notify = self._intercept = None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """POST the request and return its result; an error answer raises `MCPError`, as the SDK's does.

        `opts["timeout"]` (the SDK's discover probe sets one) ends the wait with the SDK's
        `REQUEST_TIMEOUT` error; the poll's own deadline is around the whole poll.
        """
        opts = opts or {}
        self._next_id += 1
        request_id: RequestId = self._next_id
        params = tracing.outgoing(params, request_id)  # the trace context in `_meta`, as the SDK's does
        message = (
            JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=dict(params))
            if params
            else JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method)
        )
        answers = _Answers(self, request_id)
        timeout = opts.get("timeout")
        if timeout is None:
            await self._post(message, opts.get("headers"), answers)
        else:
            with anyio.move_on_after(timeout) as waited:
                await self._post(message, opts.get("headers"), answers)
            if waited.cancelled_caught:
                raise MCPError(code=REQUEST_TIMEOUT, message=f"Request {method!r} timed out")
        answer = answers.answer
        if answer is None:
            if answers.other is not None:
                text = f"{OTHER_ANSWER}: the answer to {method!r} names id {answers.other!r}"
            else:
                text = f"{NO_ANSWER} {method!r} in what the server sent back"
            raise MCPError(code=INVALID_REQUEST, message=text)
        if isinstance(answer, JSONRPCError):
            raise MCPError.from_jsonrpc_error(answer)
        return answer.result

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        params = tracing.outgoing(params, None)
        message = (
            JSONRPCNotification(jsonrpc="2.0", method=method, params=dict(params))
            if params
            else JSONRPCNotification(jsonrpc="2.0", method=method)
        )
        await self._post(message, (opts or {}).get("headers"), _Answers(self, None))

    async def _post(
        self,
        message: JSONRPCRequest | JSONRPCNotification | JSONRPCResponse | JSONRPCError,
        headers: dict[str, str] | None,
        answers: _Answers,
    ) -> None:
        transport = self.transport
        # The transport's cached protocol-version header, kept as its own writer loop keeps it.
        if isinstance(message, JSONRPCRequest) and message.method == "initialize":
            transport._protocol_version_header = None
        elif headers is not None and (stamped := headers.get(MCP_PROTOCOL_VERSION_HEADER)) is not None:
            transport._protocol_version_header = stamped
        metadata = ClientMessageMetadata(headers=headers) if headers else None
        context = RequestContext(
            client=self.client,
            session_id=transport.session_id,
            session_message=SessionMessage(message, metadata),
            metadata=metadata,
            read_stream_writer=answers,  # type: ignore[arg-type]  # only `send` is used
        )
        await transport._handle_post_request(context)

    async def inbound(self, message: JSONRPCMessage) -> None:
        """A notification or request the server sent before its answer, handled as the SDK's loop would."""
        if isinstance(message, JSONRPCNotification):
            if self._on_notify is None or run_notify_intercept(
                self._intercept, message.method, message.params
            ):
                return
            try:
                await self._on_notify(_ServerRequestContext(None), message.method, message.params)
            except Exception:
                log.exception("notification handler for %r raised", message.method)
        elif isinstance(message, JSONRPCRequest) and self._on_request is not None:
            reply: JSONRPCResponse | JSONRPCError
            try:
                result = await self._on_request(
                    _ServerRequestContext(message.id), message.method, message.params
                )
                reply = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
            except MCPError as exc:
                reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=exc.error)
            except Exception:
                log.exception("answering the server's %r request failed", message.method)
                error = ErrorData(code=INTERNAL_ERROR, message="Internal error")
                reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
            await self._post(reply, None, _Answers(self, None))


@asynccontextmanager
async def poll_dispatcher(
    url: str,
    *,
    http_client: httpx2.AsyncClient,
    max_sse_event_size: int,
    on_inbound: Callable[[Inbound], None],
) -> AsyncGenerator[PollDispatcher, None]:
    """A `PollDispatcher` on `http_client`; ends the session with DELETE, as the SDK does.

    The client stays open (it is the caller's).
    """
    dispatcher = PollDispatcher(
        url, http_client, max_sse_event_size=max_sse_event_size, on_inbound=on_inbound
    )
    try:
        yield dispatcher
    finally:
        dispatcher.release()
        if dispatcher.transport.session_id:
            await dispatcher.transport.terminate_session(http_client)
