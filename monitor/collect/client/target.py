"""What a poll is given and what it gives back: the target, its limits, the listing, the one error."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic_core

from monitor.core.clients import DEFAULT_PROFILE, ClientProfile
from monitor.core.states import PollErrorKind, ServerOrigin

Era = Literal["handshake", "modern"]


MIN_SECRET_LENGTH = 6
"""Shorter header and env values are not scrubbed: they would mangle ordinary words and guard nothing."""


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
    sse_fallback: bool = False
    """For "http": poll over SSE when the URL refuses Streamable HTTP with a 4xx (`fetch_listing`)."""
    secrets: Sequence[str] = ()
    """Every value `${VAR}`-expanded into this target (the URL included): scrubbed from messages too."""
    origin: ServerOrigin = ServerOrigin.API
    """"config" targets come from a config file and may be anywhere; "api" ones were registered over
    HTTP, so every connection they make is checked against `Limits.allowed_hosts` (`HostPolicy`).
    The default is the checked one: a target nobody vouched for is not trusted."""
    client: ClientProfile = DEFAULT_PROFILE
    """Who the poll says it is (`clientInfo`) and what it declares it can do, in either era."""
    views: tuple[ClientProfile, ...] = ()
    """Further client profiles of the server, each polled after `client` and stored as its own view."""

    @property
    def request_headers(self) -> dict[str, str]:
        """What every HTTP request of the poll carries: the profile's User-Agent, the server's headers,
        the profile's own headers (`ClientProfile.request_headers`)."""
        return self.client.request_headers(self.headers)

    def secret_values(self) -> list[str]:
        """Every configured secret (header and env values, their words, expanded variables), longest
        first; values shorter than `MIN_SECRET_LENGTH` are left out (scrubbing them would mangle words)."""
        values = {*self.headers.values(), *(self.env or {}).values(), *self.secrets}
        values |= {part for value in self.headers.values() for part in value.split()}
        return sorted((v for v in values if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True)


@dataclass(frozen=True)
class Limits:
    timeout: float = 30.0
    """Seconds for connect + handshake + every page. Stopping a stdio server afterwards is the SDK's
    bounded sequence (close stdin, 2 s, SIGTERM, 2 s, SIGKILL), so one that ignores all of it adds ~4 s;
    then what is left of its process group gets the same SIGTERM, 2 s, SIGKILL (`stop_server_group`)."""
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
    instructions: str | None = None
    """The server's instructions to hosts (`InitializeResult.instructions`, or the discover result's)."""
    """From the start of the poll to the last page, excluding shutdown."""
    validation_errors: list[str] = field(default_factory=list)
    """Where the pages break the negotiated version's schema, which hosts validate against: the
    listing is kept as sent all the same, and stored as an invalid version."""
    ttl_ms: int | None = None
    """`ttlMs` (2026-07-28), the longest of the pages': how long a host may keep this listing."""
    cache_scope: str | None = None
    """`cacheScope`: `public`, or `private` when any page says so."""
    refetches: int = 0
    """How often the listing was read again from the start because its pages straddled a change
    (a paged listing is always read twice: the second pass confirms the first; `pages.Paging`)."""
    offers_tools: bool = True
    """False for a server whose capabilities declare no `tools`: it was not asked for any (`tools` is
    empty, `pages` 0), and is recorded as the `no tools` state, not as a failure."""
    digest: bytes | None = None
    """SHA-256 of the pages' results as compact JSON, in order (the text `listing_bytes` counts):
    the same digest, the same tools (see `Poller._index`). None once the tools were altered
    (redacted) after they arrived."""


@dataclass
class Listed:
    """One pass over every page of `tools/list`."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    pages: int = 0
    size: int = 0
    ttl_ms: int | None = None
    cache_scope: str | None = None
    refetches: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def measure(self, result: Mapping[str, Any]) -> int:
        """A page result's compact-JSON size in UTF-8, its text added to the digest.

        pydantic-core writes the text (0.18 ms for a 50-tool page, `json.dumps` 0.64 ms, the
        pure-Python `iterencode` ~4 ms) as `json.dumps` would write it compactly, but for the
        exponent of small floats (`1e-7`, not `1e-07`); a lone surrogate, which it refuses, is
        written by `json.dumps`. The one text is bounded like the answer itself, and answers past
        `LARGE_ANSWER_BYTES` are measured one at a time (`Poll._large_answer`)."""
        try:
            text = pydantic_core.to_json(result)
        except pydantic_core.PydanticSerializationError:
            compact = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
            text = compact.encode("utf-8", "surrogatepass")
        self.digest.update(text)
        return len(text)

    def cache_hints(self, result: Mapping[str, Any]) -> None:
        """`ttlMs` and `cacheScope` (2026-07-28). A host may keep each page for its TTL, so the
        listing's is the longest; a malformed hint is ignored, as a host would ignore it."""
        ttl = result.get("ttlMs")
        if isinstance(ttl, int) and not isinstance(ttl, bool) and 0 <= ttl < 2**63:
            self.ttl_ms = ttl if self.ttl_ms is None else max(self.ttl_ms, ttl)
        scope = result.get("cacheScope")
        if isinstance(scope, str) and scope in ("public", "private"):
            # private wins: a listing any page of which is private is not to be shared
            self.cache_scope = "private" if "private" in (scope, self.cache_scope) else scope


class PollError(Exception):
    """A poll that failed, with a short kind and a readable, secret-free message."""

    def __init__(self, kind: PollErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"PollError({str(self.kind)!r}, {self.message!r})"
