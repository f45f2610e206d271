"""How every way a poll can fail becomes one `PollError`: a kind, and one readable line without secrets.

The SDK reports its transports' own failures as JSON-RPC errors and wraps failures in task
groups, the transports hide HTTP statuses, and a server's text is untrusted: `Attempt` keeps what
a poll was doing when the failure came, and explains the failure by it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from monitor.collect.client.http import display_url, status_line
from monitor.collect.client.stdio import STDERR_TAIL_BYTES, StderrTail
from monitor.collect.client.target import Limits, PollError, Target
from monitor.collect.client.transport import NO_ANSWER, OTHER_ANSWER
from monitor.core.states import PollErrorKind

_SERVER_TEXT_LIMIT = 300
"""Longest stretch of server-chosen text (error messages, stray output) quoted in a message."""

_HTTP_STATUS_STAND_INS = frozenset(
    {
        (types.INTERNAL_ERROR, "Server returned an error response"),
        (types.METHOD_NOT_FOUND, "Not Found"),
        (types.INVALID_REQUEST, "Session terminated"),
    }
)
"""Errors the Streamable HTTP transport invents for an HTTP error status without a JSON-RPC body."""


POLL_ANSWER_ERRORS = (OTHER_ANSWER, NO_ANSWER)
"""The errors `PollDispatcher` reports for a POST whose answer it cannot hand back."""

TransportFailure = Literal["closed", "limit", "timeout", "malformed", "protocol"]


def transport_failure(error: MCPError) -> TransportFailure | None:
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
        ("server answered a request with 202", "Unexpected content type", "Redirect to", *POLL_ANSWER_ERRORS)
    ):
        return "protocol"
    return None


class Attempt:
    """One poll or watch session as far as it got, so a failure can be explained by what was
    happening when it came."""

    def __init__(self, target: Target, limits: Limits) -> None:
        self.target = target
        self.limits = limits
        self.stage = "connect"
        self.version: str | None = None
        self.http_status: str | None = None
        """"HTTP 401 Unauthorized" when the last POST failed: the transports hide the status."""
        self.stderr = StderrTail(STDERR_TAIL_BYTES)
        self.oversized: PollError | None = None
        """Set when `CappedBody` refused an HTTP answer: declared or grown past the cap, or measured
        over the listing limit (or not measured)."""
        self.refused: PollError | None = None
        """Set when the host policy refused a connection (see `GuardedBackend`)."""

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
                return PollError(PollErrorKind.TIMEOUT, f"could not connect within {self.limits.timeout:g} s")
            late = f" (last HTTP answer: {self.http_status})" if self.http_status else ""
            return PollError(
                PollErrorKind.TIMEOUT, f"no answer to {self.stage} within {self.limits.timeout:g} s{late}"
            )
        return self._classify(cause)

    def _classify(self, cause: BaseException) -> PollError:
        target, stage, where = self.target, self.stage, self._where()
        if isinstance(cause, MCPError):
            return self._from_rpc_error(cause)
        if isinstance(cause, ValidationError):
            version = self.version or "2025-11-25"
            return PollError(
                PollErrorKind.MALFORMED,
                f"server's {stage} result does not match the {version} schema: {validation_summary(cause)}",
            )
        if isinstance(cause, httpx2.HTTPStatusError):
            return PollError(PollErrorKind.SERVER_ERROR, f"{where} answered {status_line(cause.response)}")
        if isinstance(cause, httpx2.TimeoutException):
            return PollError(PollErrorKind.TIMEOUT, f"HTTP timeout talking to {where} during {stage}")
        if isinstance(cause, httpx2.ConnectError):
            if _caused_by(cause, ConnectionRefusedError):
                return PollError(PollErrorKind.CONNECT, f"connection refused to {where}")
            return PollError(PollErrorKind.CONNECT, f"cannot connect to {where}: {cause}")
        if isinstance(cause, httpx2.HTTPError):
            return PollError(
                PollErrorKind.CONNECT, f"HTTP connection to {where} failed during {stage}: {cause}"
            )
        if isinstance(cause, OSError | ValueError) and target.transport == "stdio" and stage == "connect":
            if target.cwd is not None and isinstance(cause, OSError) and not os.path.isdir(target.cwd):
                return PollError(  # the OS blames the command for a missing working folder
                    PollErrorKind.CONNECT,
                    f"cannot start server command {target.command!r}: "
                    f"its working directory {target.cwd!r} does not exist",
                )
            reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
            return PollError(
                PollErrorKind.CONNECT, f"cannot start server command {target.command!r}: {reason}"
            )
        return PollError(PollErrorKind.PROTOCOL, f"unexpected {type(cause).__name__} during {stage}: {cause}")

    def _from_rpc_error(self, error: MCPError) -> PollError:
        stage = self.stage
        match transport_failure(error):
            case "closed" if self.target.transport == "stdio":
                return PollError(
                    PollErrorKind.PROCESS_EXIT, f"server process exited before answering {stage}"
                )
            case "closed":
                detail = "" if error.message == "Connection closed" else f" ({clip(error.message)})"
                return PollError(
                    PollErrorKind.CONNECT, f"connection closed before the server answered {stage}{detail}"
                )
            case "limit":
                return PollError(
                    PollErrorKind.LIMIT,
                    f"the server's answer to {stage} exceeds {self.limits.max_bytes} bytes",
                )
            case "timeout":
                return PollError(PollErrorKind.TIMEOUT, f"no answer to {stage} ({error.message})")
            case "malformed":
                return PollError(
                    PollErrorKind.MALFORMED, f"server answered {stage} with a body that is not JSON-RPC"
                )
            case "protocol":
                return PollError(
                    PollErrorKind.PROTOCOL, f"server answered {stage} unusably: {clip(error.message)}"
                )
            case _:
                return PollError(
                    PollErrorKind.SERVER_ERROR, f"server answered {stage} with {self._describe(error)}"
                )

    def _describe(self, error: MCPError) -> str:
        rpc = f"JSON-RPC error {error.code}: {clip(error.message)}"
        if self.http_status is None:
            return rpc
        if (error.code, error.message) in _HTTP_STATUS_STAND_INS:
            return self.http_status
        return f"{self.http_status} ({rpc})"

    def _where(self) -> str:
        """The server, as a message names it: its URL without credentials, or its command."""
        return display_url(self.target.url) if self.target.url else repr(self.target.command)

    def _finish(self, error: PollError) -> PollError:
        """The error as the caller sees it: stderr appended, one visible line, secrets scrubbed."""
        message = error.message
        if self.target.transport == "stdio" and (tail := self.stderr.text()):
            message = f"{message}; stderr: {tail}"
        return PollError(error.kind, scrubbed(message, self.target))


def scrubbed(text: str, target: Target) -> str:
    """`text` (a server's, or about one) as one visible line with the target's secrets redacted."""
    text = _visible(text)
    for secret in target.secret_values():
        text = text.replace(secret, "[redacted]")
    return text


def stream_error(error: Exception) -> PollError:
    """What a transport delivered in place of a message: stray stdout output, an unparsable event."""
    if isinstance(error, ValidationError) and (details := error.errors()):
        received = details[0].get("input")
        if isinstance(received, str):
            return PollError(
                PollErrorKind.MALFORMED, f"server sent output that is not JSON-RPC: {clip(received)!r}"
            )
    return PollError(
        PollErrorKind.MALFORMED, f"server sent something that is not JSON-RPC: {clip(str(error))}"
    )


def validation_summary(error: ValidationError) -> str:
    """The first problem's location and message, never the offending value (it can be huge)."""
    details = error.errors()
    first = details[0]
    where = ".".join(str(part) for part in first["loc"]) or "result"
    more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def clip(text: str) -> str:
    return text if len(text) <= _SERVER_TEXT_LIMIT else text[:_SERVER_TEXT_LIMIT] + "…"


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


def _visible(text: str) -> str:
    """One line a terminal shows as it is: controls, line breaks and invisible format characters escaped."""
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def supported_versions(error: MCPError) -> list[str] | None:
    """The versions a -32022 (unsupported protocol version) error names, if it is one."""
    if error.code != types.UNSUPPORTED_PROTOCOL_VERSION:
        return None
    try:
        return types.UnsupportedProtocolVersionErrorData.model_validate(error.data).supported
    except ValidationError:
        return None
