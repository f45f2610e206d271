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

import json
import os
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp.client import ClientSession, IncomingMessage, Transport
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)
from pydantic import RootModel, ValidationError

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


@dataclass(frozen=True)
class Limits:
    timeout: float = 30.0
    """Seconds for connect + handshake + every page. Stopping a stdio server afterwards is the SDK's
    bounded sequence (close stdin, 2 s, SIGTERM, 2 s, SIGKILL), so one that ignores all of it adds ~4 s."""
    max_pages: int = 100
    max_bytes: int = 16 * 1024 * 1024
    """Total compact-JSON size of all pages' results (also the cap on one SSE event)."""
    max_tools: int = 10_000


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
            read_stream, write_stream = await stack.enter_async_context(await self._open(stack))
            session = await stack.enter_async_context(
                ClientSession(
                    read_stream, write_stream, message_handler=self._on_message, client_info=CLIENT_INFO
                )
            )
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
            headers=headers, timeout=timeout, auth=auth, event_hooks={"response": [self._on_response]}
        )

    async def _on_response(self, response: httpx2.Response) -> None:
        if response.request.method == "POST":
            failed = response.status_code >= 400
            self.http_status = (
                f"HTTP {response.status_code} {response.reason_phrase}".strip() if failed else None
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
        secrets = {*self.target.headers.values(), *(self.target.env or {}).values()}
        secrets |= {part for value in self.target.headers.values() for part in value.split()}
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= _MIN_SECRET_LENGTH:
                message = message.replace(secret, "[redacted]")
        return PollError(error.kind, message)


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
