"""The long-lived watch session: one session held open to hear every tools list-changed notification."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AsyncExitStack

import anyio
import anyio.to_thread
import httpx2
import mcp_types as types
from mcp.client import ClientSession, IncomingMessage, Transport
from mcp.client._transport import ReadStream
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import Subscription, SubscriptionLost, ToolsListChanged, listen
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_MODERN_VERSION
from pydantic import ValidationError

from monitor.collect.client.errors import clip, stream_error, transport_failure
from monitor.collect.client.http import EventHooks, NoticedBody, media_type, status_line
from monitor.collect.client.poll import Poll, as_sse, falls_back_to_sse
from monitor.collect.client.stdio import EndNoticed
from monitor.collect.client.target import Era, Limits, PollError, Target
from monitor.core.states import PollErrorKind

KEEPALIVE_INTERVAL = 30.0
"""Seconds between a watch session's keep-alive requests. Its notification streams have no read
timeout (they are quiet by nature), so without them a server that hangs, or vanished without closing
its connections, would pass for a healthy session that simply never notifies."""


async def watch_list_changed(
    target: Target,
    limits: Limits,
    *,
    on_ready: Callable[[], None],
    on_change: Callable[[], None],
    on_ack: Callable[[bool], None] | None = None,
) -> None:
    """Hold one long-lived session and report every tools list-changed notification until it ends.

    Connects as `fetch_listing` does; `limits.timeout` bounds connecting, negotiating and opening
    the notification channel, not the session. The handshake era delivers
    `notifications/tools/list_changed` on the session (for Streamable HTTP, on its GET stream);
    the 2026-07-28 era needs a `subscriptions/listen` stream. `on_ready` runs once that channel is
    open, then `on_change` once per notification, in order, each in a worker thread so a blocking
    callback never stalls the session; their exceptions propagate as they are. On 2026-07-28
    sessions `on_ack` first hears whether the listen acknowledgement kept `toolsListChanged`.

    Returns when the server closes the session gracefully (the listen stream's result, or the end
    of the HTTP notification stream); raises `PollError` when the session cannot be established or
    drops (including a stdio server exiting). Cancelling closes the session and stops a stdio server.
    """
    attempt = _Watch(target, limits, on_ready=on_ready, on_change=on_change, on_ack=on_ack)
    try:
        await attempt.watch()
    except PollError:
        if not falls_back_to_sse(attempt):  # as `fetch_listing` does for a bare `url`
            raise
        await _Watch(as_sse(target), limits, on_ready=on_ready, on_change=on_change, on_ack=on_ack).watch()


class _Watch(Poll):
    """The state of one watch session: what has arrived, and how (and whether) the session ended."""

    notifications = True

    def __init__(
        self,
        target: Target,
        limits: Limits,
        *,
        on_ready: Callable[[], None],
        on_change: Callable[[], None],
        on_ack: Callable[[bool], None] | None = None,
    ) -> None:
        super().__init__(target, limits)
        self.on_ack = on_ack
        self.on_ready = on_ready
        self.on_change = on_change
        self.era: Era | None = None
        self.setup = anyio.CancelScope(deadline=anyio.current_time() + limits.timeout)
        """Bounds everything up to the ready state; lifted once the notification channel is open."""
        self.pending = 0
        """Notifications received and not yet reported: a count, so a flood costs no memory."""
        self.wake = anyio.Event()
        self.ended = False
        self.end: PollError | None = None
        """Why the session ended, or None for a graceful close; the first reason wins."""
        self.channel_open = anyio.Event()
        """Set once the Streamable HTTP GET stream is answered (or the session ended first)."""
        self.session_id_seen = False
        self.callback_error: Exception | None = None

    async def _open(self, stack: AsyncExitStack) -> Transport:
        """Streamable HTTP on the SDK's own transport, whose GET stream carries the notifications."""
        target = self.target
        if target.transport != "http" or not target.url:
            return await super()._open(stack)
        client = await stack.enter_async_context(
            self._http_client(target.request_headers, httpx2.Timeout(self.limits.timeout))
        )
        return streamable_http_client(
            target.url, http_client=client, max_sse_event_size=self.limits.max_bytes
        )

    async def watch(self) -> None:
        """As `Poll.run`: every failure becomes one `PollError`, except what the callbacks raise."""
        failure: Exception | None = None
        try:
            with self.setup:
                await self._connect_and_watch()
        except Exception as exc:
            failure = exc
        finally:
            self._end_large_answer()
        if self.callback_error is not None:
            raise self.callback_error
        if failure is not None or self.setup.cancel_called:  # a deadline that struck leaves no exception
            raise self._finish(self._explain(failure, timed_out=self.setup.cancel_called)) from None

    async def _connect_and_watch(self) -> None:
        async with AsyncExitStack() as stack:
            session = await self._start(stack)
            with self.abort:
                self.era = (await self._negotiate(session)).era
                self._end_large_answer()  # a watch lives on: it must not keep the large-answer turn
                if self.era == "modern":
                    await self._watch_listen(session)
                else:
                    if self.target.transport == "http":
                        await self._await_get_stream()
                    await self._serve(session)
            if self.stream_error is not None:
                raise stream_error(self.stream_error)
        if self.end is not None:
            raise self.end

    async def _watch_listen(self, session: ClientSession) -> None:
        self.stage = "subscriptions/listen"
        async with AsyncExitStack() as stack:
            try:
                subscription = await stack.enter_async_context(listen(session, tools_list_changed=True))
            except MCPError as exc:
                raise self._listen_refused(exc) from None
            except SubscriptionLost:
                raise PollError(
                    PollErrorKind.PROTOCOL, "server ended subscriptions/listen before acknowledging it"
                ) from None
            honored = subscription.honored.tools_list_changed is True
            on_ack = self.on_ack
            if on_ack is not None:
                await self._call(lambda: on_ack(honored))
            if not honored:
                raise PollError(
                    PollErrorKind.PROTOCOL,
                    "server does not support subscriptions/listen for tools: it honored none",
                )
            await self._serve(session, subscription)

    def _listen_refused(self, error: MCPError) -> PollError:
        if transport_failure(error) is None and error.code == types.METHOD_NOT_FOUND:
            return PollError(
                PollErrorKind.PROTOCOL,
                f"server does not support subscriptions/listen ({self._describe(error)})",
            )
        return self._from_rpc_error(error)

    async def _await_get_stream(self) -> None:
        """Streamable HTTP's handshake era notifies on the GET stream the SDK opens after the handshake."""
        self.stage = "the notification stream (GET)"
        if not self.session_id_seen:
            raise PollError(
                PollErrorKind.PROTOCOL,
                "server assigned no Mcp-Session-Id, so no GET stream can carry its notifications",
            )
        await self.channel_open.wait()

    async def _serve(self, session: ClientSession, subscription: Subscription | None = None) -> None:
        """The ready session: no deadline now, a keep-alive, and reports until the session ends."""
        self.setup.deadline = math.inf
        self.stage = "the watch session"
        if self.ended:
            return  # it ended before it was ready: the caller raises the reason, if any
        async with anyio.create_task_group() as tg:
            if subscription is not None:
                tg.start_soon(self._pump, subscription)
            tg.start_soon(self._keep_alive, session)
            await self._report()
            tg.cancel_scope.cancel()

    async def _report(self) -> None:
        """on_ready, then on_change once per notification, one at a time, so their order is kept."""
        await self._call(self.on_ready)
        while True:
            if self.pending:
                self.pending -= 1
                await self._call(self.on_change)
            elif self.ended:
                return  # notifications that came before the end are all reported first
            else:
                await self.wake.wait()
                self.wake = anyio.Event()

    async def _call(self, callback: Callable[[], None]) -> None:
        try:
            await anyio.to_thread.run_sync(callback)
        except Exception as exc:
            self.callback_error = exc
            raise

    def _changed(self) -> None:
        self.pending += 1
        self.wake.set()

    def _end(self, reason: PollError | None) -> None:
        if not self.ended:
            self.ended, self.end = True, reason
            self.wake.set()
            self.channel_open.set()

    async def _pump(self, subscription: Subscription) -> None:
        """Drain the listen stream as events come: it coalesces events its consumer has not taken yet."""
        try:
            async for event in subscription:
                if isinstance(event, ToolsListChanged):
                    self._changed()
        except SubscriptionLost as lost:
            self._end(self._lost(lost.__cause__))
        else:
            self._end(None)

    def _lost(self, cause: BaseException | None) -> PollError:
        if not isinstance(cause, MCPError):
            return PollError(PollErrorKind.CONNECT, "server cancelled its subscriptions/listen stream")
        if transport_failure(cause) != "closed":
            self.stage = "subscriptions/listen"
            return self._from_rpc_error(cause)
        if self.target.transport == "stdio":
            return self._exited()
        return PollError(
            PollErrorKind.CONNECT, f"the subscriptions/listen stream dropped ({clip(cause.message)})"
        )

    def _exited(self) -> PollError:
        return PollError(PollErrorKind.PROCESS_EXIT, "server process exited during the watch session")

    async def _keep_alive(self, session: ClientSession) -> None:
        """A request now and then: any answer, even an error, shows the server is still there."""
        method = "server/discover" if self.era == "modern" else "ping"
        while True:
            await anyio.sleep(KEEPALIVE_INTERVAL)
            self.stage = f"the keep-alive {method}"
            try:
                with anyio.fail_after(self.limits.timeout):
                    if self.era == "modern":
                        await session.send_discover(LATEST_MODERN_VERSION)
                    else:
                        await session.send_ping()
            except TimeoutError:
                self._end(
                    PollError(
                        PollErrorKind.TIMEOUT, f"no answer to {self.stage} within {self.limits.timeout:g} s"
                    )
                )
                return
            except MCPError as exc:
                if transport_failure(exc) is not None or self.http_status is not None:
                    self._end(self._from_rpc_error(exc))
                    return
            except ValidationError:
                pass  # an answer, if not a valid one
            self.stage = "the watch session"

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            if self.era != "modern":  # there, the listen stream's frames are also teed here
                self._changed()
        elif isinstance(message, httpx2.HTTPError) and self.target.transport == "sse":
            self._end(
                PollError(PollErrorKind.CONNECT, f"the SSE stream from {self._where()} dropped: {message}")
            )
        else:
            await super()._on_message(message)

    def _reader(
        self, stream: ReadStream[SessionMessage | Exception]
    ) -> ReadStream[SessionMessage | Exception]:
        if self.target.transport == "http":
            return stream  # its read stream ends only when the session closes it
        return EndNoticed(stream, self._stream_ended)

    def _stream_ended(self) -> None:
        """A stdio server exited (or closed stdout); an SSE server closed its stream."""
        self._end(self._exited() if self.target.transport == "stdio" else None)

    def _event_hooks(self) -> EventHooks:
        return {**super()._event_hooks(), "request": [self._on_request]}

    async def _on_request(self, request: httpx2.Request) -> None:
        """Streams are quiet until something changes: no read timeout for them, and only for them."""
        if request.method == "GET" or request.headers.get("mcp-method") == "subscriptions/listen":
            timeouts = {**request.extensions.get("timeout", {}), "read": None}
            request.extensions = {**request.extensions, "timeout": timeouts}

    async def _on_response(self, response: httpx2.Response) -> None:
        await super()._on_response(response)
        if self.target.transport != "http":
            return
        if response.request.method == "POST" and "mcp-session-id" in response.headers:
            self.session_id_seen = True
        elif response.request.method == "GET" and not self.ended and not response.has_redirect_location:
            self._on_get_stream(response)  # a redirect the SDK follows is answered by another response

    def _on_get_stream(self, response: httpx2.Response) -> None:
        status = status_line(response)
        content_type = media_type(response)
        if response.status_code == 405:
            self._end(
                PollError(PollErrorKind.PROTOCOL, f"server offers no GET stream for notifications ({status})")
            )
        elif response.status_code >= 400:
            self._end(
                PollError(
                    PollErrorKind.SERVER_ERROR,
                    f"{self._where()} answered the notification stream (GET) with {status}",
                )
            )
        elif content_type != "text/event-stream":
            self._end(
                PollError(
                    PollErrorKind.PROTOCOL,
                    f"the notification stream (GET) is {clip(content_type)!r}, not text/event-stream",
                )
            )
        else:
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = NoticedBody(response.stream, self._get_stream_ended)
            self.channel_open.set()

    def _get_stream_ended(self, error: Exception | None, abandoned: bool) -> None:
        where = self._where()
        if abandoned:
            reason = f"an event over {self.limits.max_bytes} bytes, or not SSE"
            self._end(
                PollError(
                    PollErrorKind.PROTOCOL,
                    f"the client gave up the notification stream from {where} ({reason})",
                )
            )
        elif error is not None:
            self._end(
                PollError(
                    PollErrorKind.CONNECT, f"the notification stream (GET) from {where} dropped: {error}"
                )
            )
        else:
            self._end(None)
