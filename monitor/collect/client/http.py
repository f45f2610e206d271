"""HTTP plumbing: the httpx client a poll uses, its TLS context, the SSRF guard and the bodies it watches.

Servers registered over the API connect through `GuardedBackend`, which resolves a host itself
and connects only to addresses `HostPolicy` allows. Answer bodies are capped as they arrive, or
refused by their declared length (`CappedBody`), and a watch session's notification stream reports
how it ended (`NoticedBody`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore2
import httpx2
from httpx2._decoders import ContentDecoder, IdentityDecoder

from monitor.collect.client.answersize import MeasureFailed, measure_result
from monitor.core.hosts import HostPolicy, IPAddress, host_literal

EventHooks = dict[str, list[Callable[[Any], Awaitable[None]]]]

_httpx_log = logging.getLogger("httpx2")
if _httpx_log.level == logging.NOTSET:
    # httpx logs every request's full URL at INFO, and a server URL can carry a `${VAR}` secret (a
    # query token): unless logging for it was configured on purpose, only its warnings are shown.
    _httpx_log.setLevel(logging.WARNING)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the CA bundle, ~40 ms of CPU per poll otherwise."""
    return httpx2.create_ssl_context()


POLL_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
"""httpx's own pool limits, for a client that lives for one poll or one watch session."""


def new_client(
    headers: dict[str, str] | None,
    timeout: httpx2.Timeout | None,
    auth: httpx2.Auth | None,
    *,
    event_hooks: EventHooks,
    policy: HostPolicy | None,
    on_refused: Callable[[str], None],
    limits: httpx2.Limits = POLL_LIMITS,
) -> httpx2.AsyncClient:
    """An httpx client; with a `policy`, every connection it opens is checked against it."""
    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout,
        auth=auth,
        event_hooks=event_hooks,
        verify=tls_context(),
        limits=limits,
        transport=_guarded_transport(policy, on_refused, limits) if policy is not None else None,
    )


def _guarded_transport(
    policy: HostPolicy, on_refused: Callable[[str], None], limits: httpx2.Limits
) -> httpx2.AsyncHTTPTransport:
    """httpx's transport on a connection pool whose every TCP connection passes the host policy.

    Checking in the network backend covers each connection the transport opens (redirects too)
    and connects to the very address that was checked, so DNS cannot answer differently between
    the check and the connect. Environment proxies are not used for these targets: through a
    proxy, the address connected to would not be the one checked.
    """
    transport = httpx2.AsyncHTTPTransport(verify=tls_context())
    transport._pool = httpcore2.AsyncConnectionPool(
        ssl_context=tls_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=GuardedBackend(policy, on_refused),
    )
    return transport


class GuardedBackend(httpcore2.AsyncNetworkBackend):
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
        addresses = [literal] if literal is not None else await resolve(host, port)
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


async def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses a host name resolves to, for connecting: a failed lookup is a `ConnectError`."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore2.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from exc
    return _addresses(infos)


def resolved_addresses(host: str, port: int) -> list[IPAddress]:
    """The addresses a host name resolves to (blocking), for `HostPolicy.url_refusal` at registration."""
    return _addresses(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def _addresses(infos: Iterable[tuple[Any, ...]]) -> list[IPAddress]:
    """Each address of a `getaddrinfo` answer once, in its order, without an IPv6 zone."""
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = host_literal(str(sockaddr[0]).partition("%")[0])
        if address is not None and address not in found:
            found.append(address)
    return found


class DecodedBody(httpx2.AsyncByteStream):
    """An HTTP response body decoded as it arrives, with the decoder httpx chose for its
    `Content-Encoding` (gzip, deflate, br), so a cap on it (`CappedBody`) counts decoded bytes.

    httpx decodes only when the SDK reads the body, after any stream wrapper: a cap there would
    count compressed bytes, and 0.26 MB of gzip decodes to 256 MB. httpx's decoders hand the
    decoded bytes on in pieces of at most 1 MiB, so a cap stops a bomb within a piece of it.
    """

    def __init__(self, body: httpx2.AsyncByteStream, decoder: ContentDecoder) -> None:
        self._body = body
        self._decoder = decoder

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._body:
            for piece in self._decoder.decode(chunk):
                if piece:
                    yield piece
        for piece in self._decoder.flush():
            if piece:
                yield piece

    async def aclose(self) -> None:
        await self._body.aclose()


def decode_as_it_arrives(response: httpx2.Response) -> None:
    """Make `response.stream` yield decoded bytes (`DecodedBody`), for a compressed answer.

    httpx keeps the decoder it will use on the response (`_get_content_decoder`); it is taken for
    the stream, and the response left with one that passes bytes through, so nothing is decoded
    twice. Both are httpx's private parts: there is no public way to see decoded bytes as they
    arrive (`tests/test_client.py` covers gzip, deflate and br bombs).
    """
    if not response.headers.get("content-encoding"):
        return
    decoder = response._get_content_decoder()
    if isinstance(decoder, IdentityDecoder):
        return
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    response._decoder = IdentityDecoder()
    response.stream = DecodedBody(response.stream, decoder)


class BodyTooLarge(httpx2.StreamError):
    """Raised into the SDK's `response.aread()`, which turns it into an error answer to the request."""


LARGE_ANSWER_BYTES = 4 * 1024 * 1024
"""Past this, an answer is read, parsed and measured one at a time per process: each costs several
times its size in memory, so many large (or hostile, oversized) listings at once would add up."""

_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def large_answer_turns() -> asyncio.Semaphore:
    """The running loop's one turn for answers past `LARGE_ANSWER_BYTES`."""
    loop = asyncio.get_running_loop()
    turns = _TURNS.get(loop)
    if turns is None:
        turns = _TURNS[loop] = asyncio.Semaphore(1)
    return turns


def declared_length(response: httpx2.Response) -> int | None:
    """The body's length as its `Content-Length` declares it, for a body sent as it is; None when it
    declares none, or when the body is compressed (its declared length is not what it decodes to)."""
    if response.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
        return None
    length = response.headers.get("content-length", "").strip()
    return int(length) if length.isdigit() else None


class CappedBody(httpx2.AsyncByteStream):
    """An HTTP response body that stops at `cap` bytes, so a huge JSON answer is never buffered whole.

    The SDK reads a JSON answer with `response.aread()` and only then could `Limits.max_bytes` be
    checked; twice that leaves room for whitespace, since the limit counts compact JSON. A body
    whose `Content-Length` declares more than the cap is refused before any of it is read.

    With `refuse_results_over`, the body is held until it ends and an answer longer than the limit is
    measured here, with the standard library's parser, in a child process (`answersize`: the parse
    and the re-encoding that measures it take seconds of a 20 MB answer, and hold the interpreter
    lock, so on a thread too they stalled every other poll and request), before the SDK sees it:
    the SDK's validating parse of a 20 MB answer costs about ten times its size in memory, only for
    it to be refused.

    `on_over` is told how the answer was over the cap or the limit, as the end of a sentence that
    begins with the answer (`passed 33554432 bytes as it arrived`).
    """

    def __init__(
        self,
        body: httpx2.AsyncByteStream,
        cap: int,
        on_over: Callable[[str], None],
        on_large: Callable[[], Awaitable[None]] | None = None,
        *,
        declared: int | None = None,
    ) -> None:
        self._body = body
        self._cap = cap
        self._on_over = on_over
        self._on_large = on_large
        """Awaited once, when the body passes `LARGE_ANSWER_BYTES` (see `Poll._large_answer`)."""
        self._declared = declared
        """The body's length as its headers declare it (`declared_length`)."""
        self._limit: int | None = None
        self._on_unmeasured: Callable[[int, str], None] | None = None

    def refuse_results_over(self, limit: int, on_unmeasured: Callable[[int, str], None]) -> None:
        """Refuse an answer whose JSON-RPC `result` is over `limit` bytes of compact JSON (`json_size`)
        before the SDK parses it. `on_unmeasured` is called with the answer's size and how measuring
        it failed (`MeasureFailed`), and the answer refused."""
        self._limit = limit
        self._on_unmeasured = on_unmeasured

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared is not None and self._declared > self._cap:
            self._on_over(f"declared {self._declared} bytes in its Content-Length")
            raise BodyTooLarge(f"answer body declared as {self._declared} bytes, over {self._cap}")
        size = 0
        large = self._on_large
        held: list[bytes] = []
        async for chunk in self._body:
            size += len(chunk)
            if large is not None and size > LARGE_ANSWER_BYTES:
                await large()
                large = None
            if size > self._cap:
                self._on_over(f"passed {self._cap} bytes as it arrived")
                raise BodyTooLarge(f"answer body exceeds {self._cap} bytes")
            if self._limit is None:
                yield chunk
            else:
                held.append(chunk)
        if self._limit is not None and size > self._limit:
            whole = b"".join(held)
            held.clear()
            over = await self._measure(whole)
            if over is not None and over > self._limit:
                self._on_over(f"holds {over} bytes of compact JSON")
                raise BodyTooLarge(f"answer's result exceeds {self._limit} bytes")
            held.append(whole)  # one chunk: the SDK's join returns it as it is, without a copy
        while held:
            yield held.pop(0)

    async def _measure(self, whole: bytes) -> int | None:
        try:
            return await measure_result(whole)
        except MeasureFailed as exc:
            assert self._on_unmeasured is not None  # set with `_limit`
            self._on_unmeasured(len(whole), str(exc))
            raise BodyTooLarge(f"answer of {len(whole)} bytes not measured: {exc}") from exc

    async def aclose(self) -> None:
        await self._body.aclose()


class NoticedBody(httpx2.AsyncByteStream):
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


def status_line(response: httpx2.Response) -> str:
    """`HTTP 401 Unauthorized`: what an error message says of an HTTP answer."""
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


def media_type(response: httpx2.Response) -> str:
    """The answer's content type without parameters, lower-case (`text/event-stream`)."""
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


def display_url(url: str) -> str:
    """The URL without userinfo or query, which may carry credentials."""
    parts = urlsplit(url)
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}{query}"
