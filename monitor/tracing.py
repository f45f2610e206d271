"""OpenTelemetry spans of this process's polls and decisions (docs/running.md, "Tracing").

Optional: the `tracing` extra installs the OpenTelemetry SDK and its OTLP/HTTP exporter, and
nothing is set up unless an endpoint is configured (`[tracing] otlp_endpoint`, or the standard
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, which win over the file as
every environment variable does). Off, this module imports nothing of OpenTelemetry and each hook
below costs one check.

What is traced, in the MCP semantic conventions' terms (OpenTelemetry's `gen-ai/mcp.md`):

- a poll: an INTERNAL span `poll {server}` with its outcome; under it a CLIENT span per MCP
  message the poll sends (`initialize`, `notifications/initialized`, `server/discover`,
  `tools/list` per page), named `{mcp.method.name}`, with `jsonrpc.request.id`,
  `mcp.protocol.version`, `mcp.session.id`, `network.transport` (`pipe` for stdio, `tcp` for
  HTTP), `network.protocol.name`/`.version`, `server.address`/`.port`, and on failure `error.type`
  (the JSON-RPC error code, also as `rpc.response.status_code`, or the exception's name) with an
  ERROR status. Each request carries its span's context in `params._meta` (`traceparent`,
  `tracestate`: MCP SEP-414), injected by the configured propagators as the SDK injects it;
- a decision: an INTERNAL span `decide {tool}` with the answer, its reasons, the server, the tool
  (`gen_ai.tool.name`) and the host adapter that asked.

The tracer provider is this module's own, never the global one: the MCP SDK's dispatcher makes a
span of its own per request (`mcp-python-sdk`, stdio and SSE only; a Streamable HTTP poll runs on
`PollDispatcher`, which makes none) from the global provider, so with ours global a stdio poll
would be traced twice and an HTTP poll once. Left no-op, the SDK's spans pass ours through, and
the context a server gets is ours on every transport (`outgoing` stamps it last). A provider that
something else makes global (`opentelemetry-instrument`) gets the SDK's spans, children of ours.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from importlib import metadata
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger("drift_monitor.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The OpenTelemetry SDK's own endpoint settings: either one turns tracing on, and wins over the file."""
TRACES_PATH = "/v1/traces"
"""Appended to `[tracing] otlp_endpoint`, a base URL as `OTEL_EXPORTER_OTLP_ENDPOINT` is."""
MAX_SESSION_ID = 256
"""A longer `Mcp-Session-Id` (a server's choice) is left off the spans."""
SCOPE = "drift-monitor"
"""The instrumentation scope of every span here."""

SERVER_NAME = "drift_monitor.server.name"
TRANSPORT = "drift_monitor.mcp.transport"
"""The server's configured transport (`stdio`, `http`, `sse`), which `network.*` only implies."""
CLIENT_VIEW = "drift_monitor.client.view"
OUTCOME = "drift_monitor.poll.outcome"
"""`new-version`, `unchanged` or `failed`."""
TOOLS = "drift_monitor.poll.tools"
VERSION = "drift_monitor.poll.version"
DECISION = "drift_monitor.decision"
REASONS = "drift_monitor.decision.reasons"
REASON = "drift_monitor.decision.reason"
HOST = "drift_monitor.decision.host"
"""The host adapter that asked (`claude-code`, `toolhive`, ...), or the client the decision API named."""


class PollOutcome(Protocol):
    """What `PollSpan.outcome` reads of a recorded poll (`monitor.store.PollOutcome` is one)."""

    @property
    def ok(self) -> bool: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def new_version(self) -> bool: ...
    @property
    def version(self) -> int | None: ...
    @property
    def tool_count(self) -> int: ...


class _Tracing:
    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(SCOPE, _version())


_state: _Tracing | None = None
_poll: ContextVar[PollSpan | None] = ContextVar("drift_monitor_traced_poll", default=None)
_request: ContextVar[Span | None] = ContextVar("drift_monitor_traced_request", default=None)


def endpoint(configured: str | None) -> str | None:
    """Where spans go: None when the environment sets it (the exporter reads it there) or nothing
    does; else the file's base URL with `TRACES_PATH`."""
    if any(os.environ.get(name) for name in ENDPOINT_VARIABLES) or not configured:
        return None
    return configured.rstrip("/") + TRACES_PATH


def wanted(configured: str | None) -> bool:
    """Whether tracing is asked for: an endpoint in the file or the environment, and the SDK not
    switched off (`OTEL_SDK_DISABLED`)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(configured) or any(os.environ.get(name) for name in ENDPOINT_VARIABLES)


def start(otlp_endpoint: str | None, service_name: str, *, exporter: SpanExporter | None = None) -> bool:
    """Set up tracing when it is asked for (`wanted`), or to `exporter` (spans exported one by one as
    they end, not batched: a debugging or test exporter); True when spans are now recorded.

    Asked for without the `tracing` extra installed, it says so in the log and stays off: spans are
    an aid, and a monitor that will not start for want of one watches nothing."""
    global _state
    if exporter is None and not wanted(otlp_endpoint):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.warning(
            "tracing: an OTLP endpoint is configured, but the OpenTelemetry SDK is not installed "
            "(pip install 'drift-monitor[tracing]'); not tracing",
            extra={"event": "tracing.unavailable"},
        )
        return False
    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, which win
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name, SERVICE_VERSION: _version()}))
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint(otlp_endpoint))))
    stop()
    _state = _Tracing(provider)
    return True


def stop() -> None:
    """Export what is left and stop tracing (nothing when it was off)."""
    global _state
    state, _state = _state, None
    if state is not None:
        state.provider.shutdown()


@contextlib.contextmanager
def exporting(otlp_endpoint: str | None, service_name: str) -> Iterator[bool]:
    """`start`, and `stop` on the way out: around a process's work."""
    try:
        yield start(otlp_endpoint, service_name)
    finally:
        stop()


# --- polls --------------------------------------------------------------------------------------


class PollSpan:
    """One poll's span, current while the poll runs; `outcome` says how it ended."""

    def __init__(self, tracer: Tracer, server: str, transport: str, url: str | None) -> None:
        self.tracer = tracer
        self.span = tracer.start_span(
            f"poll {server}",
            attributes={SERVER_NAME: server, TRANSPORT: transport, **connection(transport, url)},
            record_exception=False,
            set_status_on_exception=False,
        )
        self.protocol_version: str | None = None
        self._tokens: list[Any] = []

    def __enter__(self) -> PollSpan:
        from opentelemetry import context, trace

        self._tokens = [context.attach(trace.set_span_in_context(self.span)), _poll.set(self)]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        from opentelemetry import context

        if exc is not None:  # a failure of the monitor's, not the server's: its text may say anything
            _failed(self.span, type(exc).__qualname__, f"the poll raised {type(exc).__qualname__}")
        token, poll = self._tokens
        _poll.reset(poll)
        context.detach(token)
        self.span.end()

    def outcome(self, outcome: PollOutcome) -> None:
        """How the poll ended: failed (`error.type` is the kind, the status ERROR with the one-line
        message, which never holds a secret), or with a listing, new or the one recorded before."""
        if not outcome.ok:
            self.span.set_attribute(OUTCOME, "failed")
            kind = str(outcome.error_kind or "_OTHER")
            _failed(self.span, kind, outcome.error or kind)
            return
        self.span.set_attributes(
            {OUTCOME: "new-version" if outcome.new_version else "unchanged", TOOLS: outcome.tool_count}
        )
        if outcome.version is not None:
            self.span.set_attribute(VERSION, outcome.version)


class _Untraced:
    """What `poll` gives while tracing is off: every step a no-op."""

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def outcome(self, outcome: PollOutcome) -> None:
        return None


UNTRACED = _Untraced()


def poll(server: str, transport: str, url: str | None) -> PollSpan | _Untraced:
    """The span of one poll of `server`, to enter around it."""
    state = _state
    return UNTRACED if state is None else PollSpan(state.tracer, server, transport, url)


class McpClient:
    """One MCP session of a traced poll (a poll may open several: client views, a retry, the SSE
    fallback): what its messages' spans share, and what the session learns as it goes."""

    def __init__(
        self, poll: PollSpan, transport: str, url: str | None, view: str, redact: Callable[[str], str]
    ) -> None:
        self.poll = poll
        self.redact = redact
        """How a failure's text goes on a span: a server's words, which may echo a secret."""
        self.attributes: dict[str, Any] = {
            TRANSPORT: transport,
            CLIENT_VIEW: view,
            **connection(transport, url),
        }

    def negotiated(self, version: str) -> None:
        """The protocol version the session now speaks: on the spans after, and on the poll's."""
        self.attributes["mcp.protocol.version"] = version
        if self.poll.protocol_version is None:  # the first session's: the primary view's
            self.poll.protocol_version = version
            self.poll.span.set_attribute("mcp.protocol.version", version)

    def http_answer(self, http_version: str, session_id: str | None) -> None:
        """An HTTP answer of the session: its protocol version and the MCP session it names."""
        self.attributes["network.protocol.version"] = http_version.removeprefix("HTTP/")
        if session_id and len(session_id) <= MAX_SESSION_ID and all("!" <= c <= "~" for c in session_id):
            self.attributes["mcp.session.id"] = session_id  # visible ASCII, as the MCP spec requires

    def message(self, method: str, version: str | None = None) -> McpMessage:
        """The CLIENT span of one request or notification the session sends, to enter around it."""
        return McpMessage(self, method, version)


def client(transport: str, url: str | None, view: str, redact: Callable[[str], str]) -> McpClient | None:
    """An MCP session's tracing, when it belongs to a traced poll (None for every other session)."""
    poll = _poll.get()
    return None if poll is None else McpClient(poll, transport, url, view, redact)


class McpMessage:
    """The CLIENT span of one MCP request or notification: current, and the one `outgoing` stamps,
    while it is awaited."""

    def __init__(self, client: McpClient, method: str, version: str | None) -> None:
        self._client = client
        self._method = method
        self._version = version
        self._tokens: list[Any] = []
        self.failed = False

    def __enter__(self) -> McpMessage:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind

        attributes = {"mcp.method.name": self._method, **self._client.attributes}
        if self._version is not None:
            attributes["mcp.protocol.version"] = self._version
        self.span = self._client.poll.tracer.start_span(
            self._method,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._tokens = [context.attach(trace.set_span_in_context(self.span)), _request.set(self.span)]
        return self

    def rpc_error(self, code: int, message: str) -> None:
        """The peer answered with a JSON-RPC error: its code is the `error.type`, its message (redacted)
        the status's description."""
        self.span.set_attribute("rpc.response.status_code", str(code))
        _failed(self.span, str(code), self._client.redact(message))
        self.failed = True

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        from opentelemetry import context

        if exc is not None and not self.failed:
            _failed(self.span, type(exc).__qualname__, self._client.redact(str(exc)))
        learned = dict(self._client.attributes)  # with what the answer told: session id, HTTP version
        if self._version is not None:  # a request made at a version of its own (`server/discover`)
            learned.pop("mcp.protocol.version", None)
        self.span.set_attributes(learned)
        token, request = self._tokens
        _request.reset(request)
        context.detach(token)
        self.span.end()


def outgoing(params: Mapping[str, Any] | None, request_id: int | str | None) -> Mapping[str, Any] | None:
    """`params` of a message sent under a message span, with that span's context in `_meta` (by the
    configured propagators: W3C `traceparent` and `tracestate` unless told otherwise) and its request
    id noted on the span; `params` itself when no message span is current (tracing off)."""
    span = _request.get()
    if span is None:
        return params
    from opentelemetry import trace
    from opentelemetry.propagate import inject

    if request_id is not None:
        span.set_attribute("jsonrpc.request.id", str(request_id))
    params = params or {}
    meta = dict(params.get("_meta") or {})
    inject(meta, context=trace.set_span_in_context(span))
    return {**params, "_meta": meta}


def connection(transport: str, url: str | None) -> dict[str, Any]:
    """The `network.*` and `server.*` attributes of a connection to an MCP server."""
    if transport == "stdio":
        return {"network.transport": "pipe"}
    attributes: dict[str, Any] = {"network.transport": "tcp", "network.protocol.name": "http"}
    try:
        parts = urlsplit(url or "")
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return attributes
    if parts.hostname:
        attributes["server.address"] = parts.hostname
        if port is not None:
            attributes["server.port"] = port
    return attributes


# --- decisions ----------------------------------------------------------------------------------


class Verdict(Protocol):
    """What `decided` reads of a decision point's verdict (`monitor.approvals.policy.Verdict` is one)."""

    @property
    def decision(self) -> str: ...
    @property
    def reasons(self) -> Sequence[str]: ...
    @property
    def reason(self) -> str: ...


def decided(server: str, tool: str, verdict: Verdict, host: str | None) -> None:
    """One decision as a span of its own: the answer, its reasons, the server, the tool and the host
    adapter that asked. The decision point calls this as it records each answer about a monitored
    server, on the thread that decided it (no trace context there: each is the root of its own trace)."""
    state = _state
    if state is None:
        return
    attributes: dict[str, Any] = {
        SERVER_NAME: server,
        "gen_ai.tool.name": tool,
        DECISION: str(verdict.decision),
        REASONS: list(verdict.reasons),
        REASON: verdict.reason,
    }
    if host is not None:
        attributes[HOST] = host
    state.tracer.start_span(f"decide {tool}", attributes=attributes).end()


# --- shared -------------------------------------------------------------------------------------


def _failed(span: Span, error_type: str, description: str) -> None:
    from opentelemetry.trace import StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR, description)


def _version() -> str:
    try:
        return metadata.version("drift-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"
