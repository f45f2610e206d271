"""The MCP client the poller uses: connect, negotiate, fetch every `tools/list` page, keep the raw JSON.

The raw JSON is the point. The SDK's models drop fields they do not declare (vendor keys,
unknown annotation hints) and their dumps add defaults that were never on the wire, while the
fingerprint must cover what the server actually claimed. So requests go through
`ClientSession.send_request` with a plain-dict result type: the SDK still checks every result
against the negotiated version's schema, then hands back the dict exactly as parsed. The
high-level `mcp.client.Client` is avoided too, because it caches listings.

A poll talks to servers we do not trust, so everything it does is bounded (time, pages, bytes,
tools), a stdio server never outlives it, and every failure becomes one `PollError` whose
message is a single readable line without secrets.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import httpcore2
import httpx2
import mcp_types as types
from mcp.client import ClientSession, IncomingMessage, Transport
from mcp.client._transport import ReadStream
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import Subscription, SubscriptionLost, ToolsListChanged, listen
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)
from pydantic import RootModel, ValidationError

from monitor.config import HostPolicy, IPAddress, host_literal

Era = Literal["handshake", "modern"]
PollErrorKind = Literal[
    "timeout", "connect", "protocol", "limit", "server-error", "process-exit", "malformed"
]

STDERR_TAIL_BYTES = 2048
"""How much of a stdio server's stderr is kept to explain its failure."""

_STDERR_EOF_WAIT = 0.5
"""Once the server is stopped, how long to wait for the rest of its stderr (a child may hold the pipe)."""

_SERVER_TEXT_LIMIT = 300
"""Longest stretch of server-chosen text (error messages, stray output) quoted in a message."""

_MIN_SECRET_LENGTH = 6
"""Shorter header and env values are not scrubbed: they would mangle ordinary words and guard nothing."""

KEEPALIVE_INTERVAL = 30.0
"""Seconds between a watch session's keep-alive requests. Its notification streams have no read
timeout (they are quiet by nature), so without them a server that hangs, or vanished without closing
its connections, would pass for a healthy session that simply never notifies."""


_httpx_log = logging.getLogger("httpx2")
if _httpx_log.level == logging.NOTSET:
    # httpx logs every request's full URL at INFO, and a server URL can carry a `${VAR}` secret (a
    # query token): unless logging for it was configured on purpose, only its warnings are shown.
    _httpx_log.setLevel(logging.WARNING)


class _Raw(RootModel[dict[str, Any]]):
    """A result kept as the dict the transport parsed, after the SDK's schema check."""


def _client_version() -> str:
    try:
        return metadata.version("drift-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"


CLIENT_INFO = types.Implementation(name="drift-monitor", version=_client_version())


@dataclass(frozen=True)
class Target:
    name: str
    transport: Literal["stdio", "http", "sse"]
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """Already ${VAR}-expanded. The values are secrets: they never reach a log or an error message."""
    command: str | None = None
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    """Extra environment for a stdio server, over the SDK's small safe default; scrubbed like headers."""
    cwd: str | None = None
    era: Era = "handshake"
    secrets: Sequence[str] = ()
    """Every value `${VAR}`-expanded into this target (the URL included): scrubbed from messages too."""
    origin: Literal["config", "api"] = "api"
    """"config" targets come from a config file and may be anywhere; "api" ones were registered over
    HTTP, so every connection they make is checked against `Limits.allowed_hosts` (`HostPolicy`).
    The default is the checked one: a target nobody vouched for is not trusted."""


@dataclass(frozen=True)
class Limits:
    timeout: float = 30.0
    """Seconds for connect + handshake + every page. Stopping a stdio server afterwards is the SDK's
    bounded sequence (close stdin, 2 s, SIGTERM, 2 s, SIGKILL), so one that ignores all of it adds ~4 s."""
    max_pages: int = 100
    max_bytes: int = 16 * 1024 * 1024
    """Total compact-JSON size of all pages' results (also the cap on one SSE event)."""
    max_tools: int = 10_000
    allowed_hosts: tuple[str, ...] = ()
    """`[monitor] allowed_server_hosts`, for targets of origin "api"."""


@dataclass
class FetchedListing:
    tools: list[dict[str, Any]]
    """The tool objects exactly as the server sent them, all pages joined, every field kept."""
    pages: int
    listing_bytes: int
    """Compact-JSON size of the pages' results, summed: what `Limits.max_bytes` is checked against."""
    protocol_version: str
    era: Era
    server_info: dict[str, Any] | None
    """`serverInfo` as sent; on the 2026 era, the discover result's optional `_meta` serverInfo stamp."""
    capabilities: dict[str, Any]
    list_changed_advertised: bool
    elapsed_ms: float
    """From the start of the poll to the last page, excluding shutdown."""


class PollError(Exception):
    """A poll that failed, with a short kind and a readable, secret-free message."""

    def __init__(self, kind: PollErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: PollErrorKind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"PollError({self.kind!r}, {self.message!r})"


async def fetch_listing(target: Target, limits: Limits = Limits()) -> FetchedListing:
    """Connect to `target`, negotiate its era, and return the complete tool listing as sent."""
    return await _Poll(target, limits).run()


async def watch_list_changed(
    target: Target,
    limits: Limits,
    *,
    on_ready: Callable[[], None],
    on_change: Callable[[], None],
) -> None:
    """Hold one long-lived session and report every tools list-changed notification until it ends.

    Connects as `fetch_listing` does; `limits.timeout` bounds connecting, negotiating and opening
    the notification channel, not the session. The handshake era delivers
    `notifications/tools/list_changed` on the session (for Streamable HTTP, on its GET stream);
    the 2026-07-28 era needs a `subscriptions/listen` stream. `on_ready` runs once that channel is
    open, then `on_change` once per notification, in order, each in a worker thread so a blocking
    callback never stalls the session; their exceptions propagate as they are.

    Returns when the server closes the session gracefully (the listen stream's result, or the end
    of the HTTP notification stream); raises `PollError` when the session cannot be established or
    drops (including a stdio server exiting). Cancelling closes the session and stops a stdio server.
    """
    await _Watch(target, limits, on_ready=on_ready, on_change=on_change).watch()


_HTTP_STATUS_STAND_INS = frozenset(
    {
        (types.INTERNAL_ERROR, "Server returned an error response"),
        (types.METHOD_NOT_FOUND, "Not Found"),
        (types.INVALID_REQUEST, "Session terminated"),
    }
)
"""Errors the Streamable HTTP transport invents for an HTTP error status without a JSON-RPC body."""


_TransportFailure = Literal["closed", "limit", "timeout", "malformed", "protocol"]


def _transport_failure(error: MCPError) -> _TransportFailure | None:
    """The kind of an error the SDK's transports synthesize locally, or None for one the server sent.

    The SDK reports its own failures as JSON-RPC errors, told apart from the server's only by
    code and message, so this is the one place that knows those messages.
    """
    code, message = error.code, error.message
    if code == types.CONNECTION_CLOSED and "byte limit" in message:
        return "limit"  # an SSE event over max_sse_event_size
    if code == types.CONNECTION_CLOSED and (
        message == "Connection closed" or message.startswith("SSE stream")
    ):
        return "closed"
    if code == types.REQUEST_TIMEOUT and message.startswith("Request ") and message.endswith("timed out"):
        return "timeout"
    if code == types.PARSE_ERROR and message.startswith("Failed to parse"):
        return "malformed"
    if code == types.INVALID_REQUEST and message.startswith(
        ("server answered a request with 202", "Unexpected content type", "Redirect to")
    ):
        return "protocol"
    return None


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the CA bundle, ~40 ms of CPU per poll otherwise."""
    return httpx2.create_ssl_context()


class _Poll:
    """The state of one poll, so a failure can be explained by what was happening when it came."""

    def __init__(self, target: Target, limits: Limits) -> None:
        self.target = target
        self.limits = limits
        self.stage = "connect"
        self.version: str | None = None
        self.listing: FetchedListing | None = None
        self.started = time.perf_counter()
        self.abort = anyio.CancelScope()
        """Cancelled when the transport delivers something that is not JSON-RPC."""
        self.stream_error: Exception | None = None
        self.http_status: str | None = None
        """"HTTP 401 Unauthorized" when the last POST failed: the transports hide the status."""
        self.stderr = _StderrTail(STDERR_TAIL_BYTES)
        self.discover_refusal = ""
        self.oversized: PollError | None = None
        """Set when an HTTP answer's body outgrew the cap while it arrived (see `_CappedBody`)."""
        self.refused: PollError | None = None
        """Set when the host policy refused a connection (see `_GuardedBackend`)."""

    async def run(self) -> FetchedListing:
        failure: Exception | None = None
        with anyio.move_on_after(self.limits.timeout) as deadline:
            try:
                await self._connect_and_list()
            except Exception as exc:
                failure = exc
        if self.listing is not None:
            # Complete before anything went wrong: a failure while shutting down changes nothing.
            return self.listing
        raise self._finish(self._explain(failure, timed_out=deadline.cancel_called)) from None

    async def _connect_and_list(self) -> None:
        async with AsyncExitStack() as stack:
            session = await self._start(stack)
            with self.abort:
                era, server_info, capabilities = await self._negotiate(session)
                tools, pages, size = await self._list(session)
            if self.stream_error is not None:
                raise _stream_error(self.stream_error)
            assert self.version is not None
            self.listing = FetchedListing(
                tools=tools,
                pages=pages,
                listing_bytes=size,
                protocol_version=self.version,
                era=era,
                server_info=server_info,
                capabilities=capabilities,
                list_changed_advertised=_advertises_list_changed(capabilities),
                elapsed_ms=(time.perf_counter() - self.started) * 1000,
            )

    async def _start(self, stack: AsyncExitStack) -> ClientSession:
        """Open the transport and enter a session on it, both closed when `stack` is."""
        read_stream, write_stream = await stack.enter_async_context(await self._open(stack))
        return await stack.enter_async_context(
            ClientSession(
                self._reader(read_stream),
                write_stream,
                message_handler=self._on_message,
                client_info=CLIENT_INFO,
            )
        )

    def _reader(
        self, stream: ReadStream[SessionMessage | Exception]
    ) -> ReadStream[SessionMessage | Exception]:
        """The transport's read stream as the session gets it; a watch wraps it to see the server go."""
        return stream

    async def _open(self, stack: AsyncExitStack) -> Transport:
        target = self.target
        if target.transport == "stdio":
            if not target.command:
                raise PollError("connect", f"stdio target {target.name!r} has no command")
            params = StdioServerParameters(
                command=target.command,
                args=list(target.args),
                env=dict(target.env) if target.env is not None else None,
                cwd=target.cwd,
            )
            return stdio_client(params, errlog=await stack.enter_async_context(self.stderr.capture()))
        if not target.url:
            raise PollError("connect", f"{target.transport} target {target.name!r} has no url")
        if target.transport == "http":
            client = await stack.enter_async_context(
                self._http_client(dict(target.headers), httpx2.Timeout(self.limits.timeout))
            )
            return streamable_http_client(
                target.url, http_client=client, max_sse_event_size=self.limits.max_bytes
            )
        return sse_client(
            target.url,
            headers=dict(target.headers),
            timeout=self.limits.timeout,
            sse_read_timeout=self.limits.timeout,
            httpx_client_factory=self._http_client,
        )

    def _http_client(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout,
            auth=auth,
            event_hooks=self._event_hooks(),
            verify=_tls_context(),
            transport=self._guarded_transport() if self.target.origin == "api" else None,
        )

    def _guarded_transport(self) -> httpx2.AsyncHTTPTransport:
        """httpx's transport on a connection pool whose every TCP connection passes the host policy.

        Checking in the network backend covers each connection the transport opens (redirects too)
        and connects to the very address that was checked, so DNS cannot answer differently between
        the check and the connect. Environment proxies are not used for these targets: through a
        proxy, the address connected to would not be the one checked.
        """
        transport = httpx2.AsyncHTTPTransport(verify=_tls_context())
        transport._pool = httpcore2.AsyncConnectionPool(
            ssl_context=_tls_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_GuardedBackend(HostPolicy(self.limits.allowed_hosts), self._refuse),
        )
        return transport

    def _refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = PollError("connect", f"refused to connect: {reason}")

    def _event_hooks(self) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
        return {"response": [self._on_response]}

    async def _on_response(self, response: httpx2.Response) -> None:
        if response.request.method == "POST":
            failed = response.status_code >= 400
            self.http_status = (
                f"HTTP {response.status_code} {response.reason_phrase}".strip() if failed else None
            )
            content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
            if content_type != "text/event-stream":  # SSE is bounded per event by max_sse_event_size
                assert isinstance(response.stream, httpx2.AsyncByteStream)
                response.stream = _CappedBody(response.stream, 2 * self.limits.max_bytes, self._too_big)

    def _too_big(self, cap: int) -> None:
        if self.oversized is None:
            self.oversized = PollError(
                "limit",
                f"listing exceeds {self.limits.max_bytes} bytes: the answer to {self.stage} "
                f"passed {cap} bytes as it arrived",
            )

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception) and self.stream_error is None:
            self.stream_error = message
            self.abort.cancel()

    async def _negotiate(self, session: ClientSession) -> tuple[Era, dict[str, Any] | None, dict[str, Any]]:
        """Handshake first, or discover first, each falling back to the other as `negotiate_auto` does."""
        if self.target.era == "modern":
            return await self._discover(session) or await self._initialize(session)
        try:
            return await self._initialize(session)
        except MCPError as refused:
            if _transport_failure(refused) is not None:
                raise
            negotiated = await self._discover(session)
            if negotiated is None:
                first, then = self._describe(refused), self.discover_refusal
                if first == then:
                    message = f"server refused initialize and server/discover: {first}"
                else:
                    message = f"server refused initialize ({first}) and server/discover ({then})"
                raise PollError("server-error", message) from None
            return negotiated

    async def _initialize(self, session: ClientSession) -> tuple[Era, dict[str, Any] | None, dict[str, Any]]:
        """`ClientSession.initialize()`, but keeping the raw result for serverInfo and capabilities."""
        self.stage = "initialize"
        request = types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=LATEST_HANDSHAKE_VERSION,
                capabilities=types.ClientCapabilities(),
                client_info=CLIENT_INFO,
            )
        )
        raw = (await session.send_request(request, _Raw)).root
        result = types.InitializeResult.model_validate(raw)
        if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise PollError(
                "protocol",
                f"server chose protocol version {_clip(result.protocol_version)!r}, which this client lacks",
            )
        session.adopt(result)
        await session.send_notification(types.InitializedNotification())
        self.version = result.protocol_version
        return "handshake", raw.get("serverInfo"), raw["capabilities"]

    async def _discover(
        self, session: ClientSession
    ) -> tuple[Era, dict[str, Any] | None, dict[str, Any]] | None:
        """The 2026-07-28 era via `server/discover`, or None (reason in `discover_refusal`) for a server
        that gave no evidence of speaking it: any JSON-RPC error, an unusable result, or no modern version.

        The SDK knows a single modern version, so unlike `negotiate_auto` there is no second probe.
        """
        self.stage = "server/discover"
        try:
            raw = await session.send_discover(LATEST_MODERN_VERSION)
        except MCPError as exc:
            if _transport_failure(exc) == "closed":
                raise
            supported = _supported_versions(exc)
            if supported is not None and not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                raise PollError(
                    "protocol",
                    f"server speaks only protocol versions {_clip(', '.join(supported))}, "
                    "none of which this client speaks",
                ) from None
            self.discover_refusal = self._describe(exc)
            return None
        try:
            result = types.DiscoverResult.model_validate(raw)
        except ValidationError as exc:
            self.discover_refusal = f"invalid result: {_validation_summary(exc)}"
            return None
        if not any(v in result.supported_versions for v in MODERN_PROTOCOL_VERSIONS):
            self.discover_refusal = f"offers only {_clip(', '.join(result.supported_versions))}"
            return None
        session.adopt(result)
        self.version = session.protocol_version
        meta = raw.get("_meta")
        server_info = meta.get(types.SERVER_INFO_META_KEY) if isinstance(meta, dict) else None
        return "modern", server_info if isinstance(server_info, dict) else None, raw["capabilities"]

    async def _list(self, session: ClientSession) -> tuple[list[dict[str, Any]], int, int]:
        limits = self.limits
        tools: list[dict[str, Any]] = []
        cursors: set[str] = set()
        cursor: str | None = None
        pages = size = 0
        while True:
            if pages == limits.max_pages:
                raise PollError("limit", f"listing exceeds {limits.max_pages} pages (cursor loop?)")
            pages += 1
            self.stage = "tools/list" if pages == 1 else f"tools/list (page {pages})"
            params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
            result = (await session.send_request(types.ListToolsRequest(params=params), _Raw)).root
            size += _json_size(result)
            if size > limits.max_bytes:
                raise PollError("limit", f"listing exceeds {limits.max_bytes} bytes (at page {pages})")
            tools.extend(result["tools"])
            if len(tools) > limits.max_tools:
                raise PollError("limit", f"listing exceeds {limits.max_tools} tools (at page {pages})")
            cursor = result.get("nextCursor")
            if cursor is None:
                return tools, pages, size
            if cursor in cursors:
                raise PollError(
                    "limit", f"server repeated cursor {_clip(cursor)!r} on page {pages} (cursor loop)"
                )
            cursors.add(cursor)

    def _explain(self, failure: Exception | None, *, timed_out: bool) -> PollError:
        cause = _root_cause(failure) if failure is not None else None
        if isinstance(cause, PollError):
            return cause
        if self.oversized is not None:  # the SDK reports the cut body as a parse error
            return self.oversized
        if self.refused is not None:
            return self.refused
        if timed_out or cause is None:
            if self.stage == "connect":
                return PollError("timeout", f"could not connect within {self.limits.timeout:g} s")
            late = f" (last HTTP answer: {self.http_status})" if self.http_status else ""
            return PollError("timeout", f"no answer to {self.stage} within {self.limits.timeout:g} s{late}")
        return self._classify(cause)

    def _classify(self, cause: BaseException) -> PollError:
        target, stage = self.target, self.stage
        where = _display_url(target.url) if target.url else repr(target.command)
        if isinstance(cause, MCPError):
            return self._from_rpc_error(cause)
        if isinstance(cause, ValidationError):
            version = self.version or "2025-11-25"
            return PollError(
                "malformed",
                f"server's {stage} result does not match the {version} schema: {_validation_summary(cause)}",
            )
        if isinstance(cause, httpx2.HTTPStatusError):
            status = f"HTTP {cause.response.status_code} {cause.response.reason_phrase}".strip()
            return PollError("server-error", f"{where} answered {status}")
        if isinstance(cause, httpx2.TimeoutException):
            return PollError("timeout", f"HTTP timeout talking to {where} during {stage}")
        if isinstance(cause, httpx2.ConnectError):
            if _caused_by(cause, ConnectionRefusedError):
                return PollError("connect", f"connection refused to {where}")
            return PollError("connect", f"cannot connect to {where}: {cause}")
        if isinstance(cause, httpx2.HTTPError):
            return PollError("connect", f"HTTP connection to {where} failed during {stage}: {cause}")
        if isinstance(cause, OSError | ValueError) and target.transport == "stdio" and stage == "connect":
            reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
            return PollError("connect", f"cannot start server command {target.command!r}: {reason}")
        return PollError("protocol", f"unexpected {type(cause).__name__} during {stage}: {cause}")

    def _from_rpc_error(self, error: MCPError) -> PollError:
        stage = self.stage
        match _transport_failure(error):
            case "closed" if self.target.transport == "stdio":
                return PollError("process-exit", f"server process exited before answering {stage}")
            case "closed":
                detail = "" if error.message == "Connection closed" else f" ({_clip(error.message)})"
                return PollError("connect", f"connection closed before the server answered {stage}{detail}")
            case "limit":
                return PollError(
                    "limit", f"the server's answer to {stage} exceeds {self.limits.max_bytes} bytes"
                )
            case "timeout":
                return PollError("timeout", f"no answer to {stage} ({error.message})")
            case "malformed":
                return PollError("malformed", f"server answered {stage} with a body that is not JSON-RPC")
            case "protocol":
                return PollError("protocol", f"server answered {stage} unusably: {_clip(error.message)}")
            case _:
                return PollError("server-error", f"server answered {stage} with {self._describe(error)}")

    def _describe(self, error: MCPError) -> str:
        rpc = f"JSON-RPC error {error.code}: {_clip(error.message)}"
        if self.http_status is None:
            return rpc
        if (error.code, error.message) in _HTTP_STATUS_STAND_INS:
            return self.http_status
        return f"{self.http_status} ({rpc})"

    def _finish(self, error: PollError) -> PollError:
        """The error as the caller sees it: stderr appended, one visible line, secrets scrubbed."""
        message = error.message
        if self.target.transport == "stdio" and (tail := self.stderr.text()):
            message = f"{message}; stderr: {tail}"
        message = _visible(message)
        secrets = {*self.target.headers.values(), *(self.target.env or {}).values(), *self.target.secrets}
        secrets |= {part for value in self.target.headers.values() for part in value.split()}
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= _MIN_SECRET_LENGTH:
                message = message.replace(secret, "[redacted]")
        return PollError(error.kind, message)


class _Watch(_Poll):
    """The state of one watch session: what has arrived, and how (and whether) the session ended."""

    def __init__(
        self,
        target: Target,
        limits: Limits,
        *,
        on_ready: Callable[[], None],
        on_change: Callable[[], None],
    ) -> None:
        super().__init__(target, limits)
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

    async def watch(self) -> None:
        """As `_Poll.run`: every failure becomes one `PollError`, except what the callbacks raise."""
        failure: Exception | None = None
        try:
            with self.setup:
                await self._connect_and_watch()
        except Exception as exc:
            failure = exc
        if self.callback_error is not None:
            raise self.callback_error
        if failure is not None or self.setup.cancel_called:  # a deadline that struck leaves no exception
            raise self._finish(self._explain(failure, timed_out=self.setup.cancel_called)) from None

    async def _connect_and_watch(self) -> None:
        async with AsyncExitStack() as stack:
            session = await self._start(stack)
            with self.abort:
                self.era, _, _ = await self._negotiate(session)
                if self.era == "modern":
                    await self._watch_listen(session)
                else:
                    if self.target.transport == "http":
                        await self._await_get_stream()
                    await self._serve(session)
            if self.stream_error is not None:
                raise _stream_error(self.stream_error)
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
                    "protocol", "server ended subscriptions/listen before acknowledging it"
                ) from None
            if not subscription.honored.tools_list_changed:
                raise PollError(
                    "protocol", "server does not support subscriptions/listen for tools: it honored none"
                )
            await self._serve(session, subscription)

    def _listen_refused(self, error: MCPError) -> PollError:
        if _transport_failure(error) is None and error.code == types.METHOD_NOT_FOUND:
            return PollError(
                "protocol", f"server does not support subscriptions/listen ({self._describe(error)})"
            )
        return self._from_rpc_error(error)

    async def _await_get_stream(self) -> None:
        """Streamable HTTP's handshake era notifies on the GET stream the SDK opens after the handshake."""
        self.stage = "the notification stream (GET)"
        if not self.session_id_seen:
            raise PollError(
                "protocol",
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
            return PollError("connect", "server cancelled its subscriptions/listen stream")
        if _transport_failure(cause) != "closed":
            self.stage = "subscriptions/listen"
            return self._from_rpc_error(cause)
        if self.target.transport == "stdio":
            return self._exited()
        return PollError("connect", f"the subscriptions/listen stream dropped ({_clip(cause.message)})")

    def _exited(self) -> PollError:
        return PollError("process-exit", "server process exited during the watch session")

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
                self._end(PollError("timeout", f"no answer to {self.stage} within {self.limits.timeout:g} s"))
                return
            except MCPError as exc:
                if _transport_failure(exc) is not None or self.http_status is not None:
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
            self._end(PollError("connect", f"the SSE stream from {self._where()} dropped: {message}"))
        else:
            await super()._on_message(message)

    def _reader(
        self, stream: ReadStream[SessionMessage | Exception]
    ) -> ReadStream[SessionMessage | Exception]:
        if self.target.transport == "http":
            return stream  # its read stream ends only when the session closes it
        return _EndNoticed(stream, self._stream_ended)

    def _stream_ended(self) -> None:
        """A stdio server exited (or closed stdout); an SSE server closed its stream."""
        self._end(self._exited() if self.target.transport == "stdio" else None)

    def _event_hooks(self) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
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
        status = f"HTTP {response.status_code} {response.reason_phrase}".strip()
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if response.status_code == 405:
            self._end(PollError("protocol", f"server offers no GET stream for notifications ({status})"))
        elif response.status_code >= 400:
            self._end(
                PollError(
                    "server-error", f"{self._where()} answered the notification stream (GET) with {status}"
                )
            )
        elif content_type != "text/event-stream":
            self._end(
                PollError(
                    "protocol",
                    f"the notification stream (GET) is {_clip(content_type)!r}, not text/event-stream",
                )
            )
        else:
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _NoticedBody(response.stream, self._get_stream_ended)
            self.channel_open.set()

    def _get_stream_ended(self, error: Exception | None, abandoned: bool) -> None:
        where = self._where()
        if abandoned:
            reason = f"an event over {self.limits.max_bytes} bytes, or not SSE"
            self._end(
                PollError("protocol", f"the client gave up the notification stream from {where} ({reason})")
            )
        elif error is not None:
            self._end(PollError("connect", f"the notification stream (GET) from {where} dropped: {error}"))
        else:
            self._end(None)

    def _where(self) -> str:
        return _display_url(self.target.url) if self.target.url else repr(self.target.command)


class _EndNoticed:
    """A transport's read stream that reports its end: how a session learns its stdio server exited."""

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

    def __aiter__(self) -> _EndNoticed:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _EndNoticed:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _NoticedBody(httpx2.AsyncByteStream):
    """An HTTP response body that reports how it ended: by the server, broken, or given up by the client."""

    def __init__(
        self, body: httpx2.AsyncByteStream, on_end: Callable[[Exception | None, bool], None]
    ) -> None:
        self._body = body
        self._on_end = on_end
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._body:
                yield chunk
        except Exception as exc:
            self._report(exc, abandoned=False)
            raise
        self._report(None, abandoned=False)

    async def aclose(self) -> None:
        self._report(None, abandoned=True)
        await self._body.aclose()

    def _report(self, error: Exception | None, *, abandoned: bool) -> None:
        if not self._done:
            self._done = True
            self._on_end(error, abandoned)


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves the host itself, refuses it unless every address passes the policy, then connects
    to a checked address (TLS still verifies the certificate against the URL's host name)."""

    def __init__(self, policy: HostPolicy, on_refused: Callable[[str], None]) -> None:
        self._policy = policy
        self._on_refused = on_refused
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        literal = host_literal(host)
        addresses = [literal] if literal is not None else await _resolve(host, port)
        for address in addresses:
            problem = self._policy.address_refusal(host, address)
            if problem is not None:
                self._on_refused(problem)
                raise httpcore2.ConnectError(problem)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._backend.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except httpcore2.ConnectError as exc:
                failure = exc
        raise failure or httpcore2.ConnectError(f"{host} resolves to no address")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise httpcore2.ConnectError("unix sockets are not allowed for servers registered over the API")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore2.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from exc
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = host_literal(str(sockaddr[0]).partition("%")[0])
        if address is not None and address not in found:
            found.append(address)
    return found


class _BodyTooLarge(httpx2.StreamError):
    """Raised into the SDK's `response.aread()`, which turns it into an error answer to the request."""


class _CappedBody(httpx2.AsyncByteStream):
    """An HTTP response body that stops at `cap` bytes, so a huge JSON answer is never buffered whole.

    The SDK reads a JSON answer with `response.aread()` and only then could `Limits.max_bytes` be
    checked; twice that leaves room for whitespace, since the limit counts compact JSON.
    """

    def __init__(self, body: httpx2.AsyncByteStream, cap: int, on_over: Callable[[int], None]) -> None:
        self._body = body
        self._cap = cap
        self._on_over = on_over

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._body:
            size += len(chunk)
            if size > self._cap:
                self._on_over(self._cap)
                raise _BodyTooLarge(f"answer body exceeds {self._cap} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._body.aclose()


class _StderrTail:
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


def _stream_error(error: Exception) -> PollError:
    """What a transport delivered in place of a message: stray stdout output, an unparsable event."""
    if isinstance(error, ValidationError) and (details := error.errors()):
        received = details[0].get("input")
        if isinstance(received, str):
            return PollError("malformed", f"server sent output that is not JSON-RPC: {_clip(received)!r}")
    return PollError("malformed", f"server sent something that is not JSON-RPC: {_clip(str(error))}")


def _advertises_list_changed(capabilities: Mapping[str, Any]) -> bool:
    tools = capabilities.get("tools")
    return isinstance(tools, Mapping) and tools.get("listChanged") is True


def _supported_versions(error: MCPError) -> list[str] | None:
    """The versions a -32022 (unsupported protocol version) error names, if it is one."""
    if error.code != types.UNSUPPORTED_PROTOCOL_VERSION:
        return None
    try:
        return types.UnsupportedProtocolVersionErrorData.model_validate(error.data).supported
    except ValidationError:
        return None


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _root_cause(error: BaseException) -> BaseException | None:
    """The exception that explains a failure the SDK's task groups may have wrapped, and wrapped again.

    Our own `PollError` wins; cancellations are only the echo of the failure elsewhere.
    """
    cancelled = anyio.get_cancelled_exc_class()
    leaves = [leaf for leaf in _leaves(error) if not isinstance(leaf, cancelled)]
    return next((leaf for leaf in leaves if isinstance(leaf, PollError)), leaves[0] if leaves else None)


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _validation_summary(error: ValidationError) -> str:
    """The first problem's location and message, never the offending value (it can be huge)."""
    details = error.errors()
    first = details[0]
    where = ".".join(str(part) for part in first["loc"]) or "result"
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _display_url(url: str) -> str:
    """The URL without userinfo or query, which may carry credentials."""
    parts = urlsplit(url)
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}{query}"


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def _clip(text: str) -> str:
    return text if len(text) <= _SERVER_TEXT_LIMIT else text[:_SERVER_TEXT_LIMIT] + "…"


def _visible(text: str) -> str:
    """One line a terminal shows as it is: controls, line breaks and invisible format characters escaped."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)
