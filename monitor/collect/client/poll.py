"""The poll: connect, negotiate the era (each falling back to the other), fetch every `tools/list` page.

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

import asyncio
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import replace
from typing import Any, NamedTuple

import anyio
import httpx2
import mcp_types as types
from mcp.client import ClientSession, IncomingMessage, Transport
from mcp.client._transport import ReadStream
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import MCP_SESSION_ID
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)
from pydantic import ValidationError

from monitor.collect.client.clients import LISTENER, HttpClients, Listener
from monitor.collect.client.errors import (
    Attempt,
    clip,
    stream_error,
    supported_versions,
    transport_failure,
    validation_summary,
)
from monitor.collect.client.http import (
    CappedBody,
    EventHooks,
    declared_length,
    decode_as_it_arrives,
    large_answer_turns,
    media_type,
    new_client,
    status_line,
)
from monitor.collect.client.negotiation import ProfileSession
from monitor.collect.client.pages import Paging, Raw
from monitor.collect.client.stdio import ResultsSeen, server_group, stop_server_group
from monitor.collect.client.target import Era, FetchedListing, Limits, Listed, PollError, Target
from monitor.collect.client.traced import TracedSession, TracedWrites, session_tracing
from monitor.collect.client.transport import PollDispatcher, poll_dispatcher
from monitor.core.hosts import HostPolicy
from monitor.core.listing import offers_tools
from monitor.core.states import PollErrorKind, ServerOrigin
from monitor.tracing import McpClient

_SSE_ONLY = ("HTTP 400 ", "HTTP 404 ", "HTTP 405 ")
"""How an SSE-only server (the 2024-11-05 transport) answers a Streamable HTTP POST."""


class Negotiated(NamedTuple):
    """What a session was opened with, as the server sent it."""

    era: Era
    server_info: dict[str, Any] | None
    capabilities: dict[str, Any]
    instructions: str | None
    """The instructions hosts put into the model's context (None: none, or not a string)."""


async def fetch_listing(
    target: Target,
    limits: Limits = Limits(),  # noqa: B008 - frozen
    clients: HttpClients | None = None,
) -> FetchedListing:
    """Connect to `target`, negotiate its era, and return the complete tool listing as sent.

    With `clients`, a Streamable HTTP target is polled on its kept client (and connection).

    A Streamable HTTP target with `sse_fallback` whose URL refuses the POST with 400, 404 or 405
    is polled over SSE instead, the backwards-compatibility path the MCP specification gives
    clients and hosts take for a bare `url`.
    """
    poll = Poll(target, limits, clients)
    try:
        return await poll.run()
    except PollError:
        if not falls_back_to_sse(poll):
            raise
    return await Poll(as_sse(target), limits).run()


def falls_back_to_sse(attempt: Attempt) -> bool:
    """Whether a failed attempt on a `sse_fallback` target was the URL refusing Streamable HTTP."""
    target = attempt.target
    refused = (attempt.http_status or "").startswith(_SSE_ONLY)
    return target.transport == "http" and target.sse_fallback and refused


def as_sse(target: Target) -> Target:
    return replace(target, transport="sse")


class Poll(Paging):
    """One poll, and the session machinery a watch session shares (it extends this)."""

    notifications = False
    """Whether the session listens for server notifications (a watch does); a poll opens no GET
    stream for them (`transport.PollDispatcher`)."""

    def __init__(self, target: Target, limits: Limits, clients: HttpClients | None = None) -> None:
        super().__init__(target, limits)
        self.clients = clients
        self.listing: FetchedListing | None = None
        self.started = time.perf_counter()
        self.abort = anyio.CancelScope()
        """Cancelled when the transport delivers something that is not JSON-RPC."""
        self.stream_error: Exception | None = None
        self.discover_refusal = ""
        self.last_result = None
        self.invalid = []
        self.large_turn: asyncio.Semaphore | None = None
        self.traced: McpClient | None = None
        """This attempt's session in its poll's trace (`monitor.tracing`); None when not traced."""

    async def run(self) -> FetchedListing:
        failure: Exception | None = None
        with anyio.move_on_after(self.limits.timeout) as deadline:
            try:
                await self._connect_and_list()
            except Exception as exc:
                failure = exc
            finally:
                self._end_large_answer()
        if self.listing is not None:
            # Complete before anything went wrong: a failure while shutting down changes nothing.
            return self.listing
        raise self._finish(self._explain(failure, timed_out=deadline.cancel_called)) from None

    async def _connect_and_list(self) -> None:
        async with AsyncExitStack() as stack:
            session = await self._start(stack)
            with self.abort:
                era, server_info, capabilities, instructions = await self._negotiate(session)
                # No tools capability, no tools: hosts do not ask for them, and nor does a poll.
                offered = offers_tools(capabilities)
                listed = await self._list_consistently(session) if offered else Listed()
            self._end_large_answer()
            if self.stream_error is not None:
                raise stream_error(self.stream_error)
            assert self.version is not None
            self.listing = FetchedListing(
                tools=listed.tools,
                pages=listed.pages,
                listing_bytes=listed.size,
                protocol_version=self.version,
                era=era,
                server_info=server_info,
                capabilities=capabilities,
                instructions=instructions,
                list_changed_advertised=_advertises_list_changed(capabilities),
                elapsed_ms=(time.perf_counter() - self.started) * 1000,
                validation_errors=self.invalid,
                ttl_ms=listed.ttl_ms,
                cache_scope=listed.cache_scope,
                refetches=listed.refetches,
                offers_tools=offered,
                digest=listed.digest.digest(),
            )

    async def _start(self, stack: AsyncExitStack) -> ClientSession:
        """Open the transport and enter a session on it, both closed when `stack` is."""
        target, profile = self.target, self.target.client
        if target.transport != "stdio" and not target.url:
            raise PollError(PollErrorKind.CONNECT, f"{target.transport} target {target.name!r} has no url")
        identity: dict[str, Any] = {
            "message_handler": self._on_message,
            "client_info": types.Implementation(name=profile.name, version=profile.version),
            "capabilities": profile.capabilities,
        }
        self.traced = traced = session_tracing(target)
        if target.transport == "http" and not self.notifications:
            dispatcher = await stack.enter_async_context(self._dispatcher(stack))
            return await stack.enter_async_context(self._session(dispatcher=dispatcher, **identity))
        read, write = await stack.enter_async_context(await self._open(stack))
        if traced is not None:
            write = TracedWrites(write)
        return await stack.enter_async_context(self._session(self._reader(read), write, **identity))

    def _session(self, *args: Any, **kwargs: Any) -> ProfileSession:
        """The session, its messages traced when this attempt is (`monitor.collect.client.traced`)."""
        if self.traced is None:
            return ProfileSession(*args, **kwargs)
        return TracedSession(self.traced, *args, **kwargs)

    def _dispatcher(self, stack: AsyncExitStack) -> AbstractAsyncContextManager[PollDispatcher]:
        """A one-shot Streamable HTTP poll: its POSTs on the server's kept client, or on one of its own."""
        target = self.target
        assert target.url is not None  # `_start` checked
        if self.clients is not None:
            token = LISTENER.set(Listener(self._on_response, self._refuse))
            stack.callback(LISTENER.reset, token)
            client = self.clients.client(target, self.limits)
        else:
            client = self._http_client(target.request_headers, httpx2.Timeout(self.limits.timeout))
            stack.push_async_callback(client.aclose)
        return poll_dispatcher(
            target.url, http_client=client, max_sse_event_size=self.limits.max_bytes, on_inbound=self._inbound
        )

    def _reader(
        self, stream: ReadStream[SessionMessage | Exception]
    ) -> ReadStream[SessionMessage | Exception]:
        """The transport's read stream as the session gets it, noting each result as it was parsed (a
        listing that fails the schema check is kept from here); a watch wraps it to see the server go."""
        return ResultsSeen(stream, self._seen)

    def _seen(self, message: object) -> None:
        if isinstance(message, SessionMessage) and isinstance(message.message, types.JSONRPCResponse):
            self.last_result = message.message.result

    def _inbound(self, message: object) -> None:
        """A message as it arrived (a result is noted, `_seen`); an `Exception` that stood in place of
        one ends the poll, and the first explains it. `PollDispatcher` hands on everything here."""
        self._seen(message)
        if isinstance(message, Exception) and self.stream_error is None:
            self.stream_error = message
            self.abort.cancel()

    async def _open(self, stack: AsyncExitStack) -> Transport:
        target = self.target
        if target.transport == "stdio":
            if not target.command:
                raise PollError(PollErrorKind.CONNECT, f"stdio target {target.name!r} has no command")
            params = StdioServerParameters(
                command=target.command,
                args=list(target.args),
                env=dict(target.env) if target.env is not None else None,
                cwd=target.cwd,
            )
            errlog = await stack.enter_async_context(self.stderr.capture())
            # Left after the transport: what is left of the server's process group is stopped too.
            stack.push_async_callback(stop_server_group, stack.enter_context(server_group()))
            return stdio_client(params, errlog=errlog)
        assert target.url is not None  # `_start` checked
        return sse_client(  # "sse" (a poll on "http" runs a `PollDispatcher`; a watch overrides this)
            target.url,
            headers=target.request_headers,
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
        """The SDK's httpx client factory: targets registered over the API connect only where allowed."""
        checked = self.target.origin == ServerOrigin.API
        return new_client(
            headers,
            timeout,
            auth,
            event_hooks=self._event_hooks(),
            policy=HostPolicy(self.limits.allowed_hosts) if checked else None,
            on_refused=self._refuse,
        )

    def _refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = PollError(PollErrorKind.CONNECT, f"refused to connect: {reason}")

    def _event_hooks(self) -> EventHooks:
        return {"response": [self._on_response]}

    async def _on_response(self, response: httpx2.Response) -> None:
        if self.traced is not None:
            self.traced.http_answer(response.http_version, response.headers.get(MCP_SESSION_ID))
        if response.request.method == "POST":
            self.http_status = status_line(response) if response.status_code >= 400 else None
            if media_type(response) != "text/event-stream":  # SSE is bounded per event by max_sse_event_size
                decode_as_it_arrives(response)  # the caps count decoded bytes
                assert isinstance(response.stream, httpx2.AsyncByteStream)
                response.stream = CappedBody(
                    response.stream,
                    2 * self.limits.max_bytes,
                    self._too_big,
                    self._large_answer,
                    declared=declared_length(response),
                )
                if self.stage.startswith("tools/list"):
                    response.stream.refuse_results_over(self.limits.max_bytes, self._unmeasured)

    async def _large_answer(self) -> None:
        """Take the process's large-answer turn (held until the listing is read or the poll ends), so
        concurrent polls of huge listings are parsed one at a time and memory stays bounded."""
        if self.large_turn is None:
            turn = large_answer_turns()
            await turn.acquire()
            self.large_turn = turn

    def _end_large_answer(self) -> None:
        if self.large_turn is not None:
            self.large_turn.release()
            self.large_turn = None

    def _too_big(self, how: str) -> None:
        """An answer over the listing limit; `how`, from `CappedBody`: "passed N bytes as it arrived"."""
        if self.oversized is None:
            self.oversized = PollError(
                PollErrorKind.LIMIT,
                f"listing exceeds {self.limits.max_bytes} bytes: the answer to {self.stage} {how}",
            )

    def _unmeasured(self, size: int, why: str) -> None:
        """An answer longer than the listing limit that could not be measured as compact JSON: refused
        all the same (kept, it would go to the SDK's parse, which costs ten times its size)."""
        if self.oversized is None:
            self.oversized = PollError(
                PollErrorKind.LIMIT,
                f"could not measure the answer to {self.stage} ({size} bytes as sent, over the "
                f"{self.limits.max_bytes}-byte listing limit): {why}",
            )

    async def _on_message(self, message: IncomingMessage) -> None:
        self._inbound(message)

    async def _negotiate(self, session: ClientSession) -> Negotiated:
        """Handshake first, or discover first, each falling back to the other as `negotiate_auto` does."""
        if self.target.era == "modern":
            return await self._discover(session) or await self._initialize(session)
        try:
            return await self._initialize(session)
        except MCPError as refused:
            if transport_failure(refused) is not None:
                raise
            negotiated = await self._discover(session)
            if negotiated is None:
                first, then = self._describe(refused), self.discover_refusal
                if first == then:
                    message = f"server refused initialize and server/discover: {first}"
                else:
                    message = f"server refused initialize ({first}) and server/discover ({then})"
                raise PollError(PollErrorKind.SERVER_ERROR, message) from None
            return negotiated

    async def _initialize(self, session: ClientSession) -> Negotiated:
        """`ClientSession.initialize()`, but keeping the raw result for serverInfo and capabilities."""
        self.stage = "initialize"
        request = types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=LATEST_HANDSHAKE_VERSION,
                capabilities=types.ClientCapabilities.model_validate(self.target.client.capabilities),
                client_info=types.Implementation(
                    name=self.target.client.name, version=self.target.client.version
                ),
            )
        )
        raw = (await session.send_request(request, Raw)).root
        result = types.InitializeResult.model_validate(raw)
        if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise PollError(
                PollErrorKind.PROTOCOL,
                f"server chose protocol version {clip(result.protocol_version)!r}, which this client lacks",
            )
        session.adopt(result)
        await session.send_notification(types.InitializedNotification())
        self.version = result.protocol_version
        return Negotiated(
            "handshake", raw.get("serverInfo"), raw["capabilities"], _text(raw.get("instructions"))
        )

    async def _discover(self, session: ClientSession) -> Negotiated | None:
        """The 2026-07-28 era via `server/discover`, or None (reason in `discover_refusal`) for a server
        that gave no evidence of speaking it: any JSON-RPC error, an unusable result, or no modern version.

        The SDK knows a single modern version, so unlike `negotiate_auto` there is no second probe.
        """
        self.stage = "server/discover"
        try:
            raw = await session.send_discover(LATEST_MODERN_VERSION)
        except MCPError as exc:
            if transport_failure(exc) == "closed":
                raise
            supported = supported_versions(exc)
            if supported is not None and not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                raise PollError(
                    PollErrorKind.PROTOCOL,
                    f"server speaks only protocol versions {clip(', '.join(supported))}, "
                    "none of which this client speaks",
                ) from None
            self.discover_refusal = self._describe(exc)
            return None
        try:
            result = types.DiscoverResult.model_validate(raw)
        except ValidationError as exc:
            self.discover_refusal = f"invalid result: {validation_summary(exc)}"
            return None
        if not any(v in result.supported_versions for v in MODERN_PROTOCOL_VERSIONS):
            self.discover_refusal = f"offers only {clip(', '.join(result.supported_versions))}"
            return None
        session.adopt(result)
        self.version = session.protocol_version
        meta = raw.get("_meta")
        server_info = meta.get(types.SERVER_INFO_META_KEY) if isinstance(meta, dict) else None
        info = server_info if isinstance(server_info, dict) else None
        return Negotiated("modern", info, raw["capabilities"], _text(raw.get("instructions")))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _advertises_list_changed(capabilities: Mapping[str, Any]) -> bool:
    tools = capabilities.get("tools")
    return isinstance(tools, Mapping) and tools.get("listChanged") is True
