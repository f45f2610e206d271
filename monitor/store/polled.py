"""A poll on its way to the store (what was fetched, what the writer may reuse) and as recorded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.core.clients import ClientProfile
from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules.catalog import Cleared, PollFacts
from monitor.store.models import FindingRecord, Server, Snapshot
from monitor.store.views import View


@dataclass(frozen=True)
class CacheHints:
    """A listing's 2026-07-28 caching hints (outside the fingerprint) and the re-fetches it took."""

    ttl_ms: int | None = None
    cache_scope: str | None = None
    refetches: int = 0


@dataclass(frozen=True)
class PreparedDiff:
    """The changed tools and their findings, computed before the poll's transaction, against the
    version that was current then."""

    from_fingerprint: str
    changes: list[ToolChange]
    findings: list[Finding]


@dataclass(frozen=True)
class SuccessfulPoll:
    """A fetched, validated listing of one server, waiting to be recorded."""

    server_id: int
    listing: CanonicalListing
    started_at: datetime
    finished_at: datetime
    pages: int
    protocol_version: str
    server_info: dict[str, Any] | None
    capabilities: dict[str, Any]
    list_changed_advertised: bool
    metas: dict[str, Any] = field(default_factory=dict)
    """Tool name -> `_meta` as sent (outside the fingerprint; kept with the version)."""
    metas_digest: str | None = None
    """`metas_digest(metas)`; None: not known, so not compared (`metas_changed`)."""
    instructions: str | None = None
    """The server's instructions to hosts (outside the fingerprint; kept with the version)."""
    instructions_digest: str | None = None
    """`instructions_digest(instructions)`; None: not known, so not compared (`instructions_changed`)."""
    validation_errors: tuple[str, ...] = ()
    client: ClientProfile | None = None
    """The profile the listing was polled as (its view is kept too)."""
    views: tuple[View, ...] = ()
    """The server's further client profiles' listings, compared with the primary one."""
    views_complete: bool = True
    """Every view of the server was polled (False: its own-identity view was not due this time, so
    no `listing-varies-by-client` alert is resolved on what the others show)."""
    recheck_views: bool = False
    """Compare the views even if none changed (the own-identity view, polled now and then), storing
    only differences the latest comparison did not already record."""
    cache: CacheHints = CacheHints()
    prepared: PreparedDiff | None = None
    digest: bytes | None = None
    """SHA-256 of the JSON text the listing was read from (`FetchedListing.digest`), kept with the
    version so a restarted poller knows the text; None when the poll had none (redacted secrets)."""

    @property
    def compact(self) -> bool:
        """Whether, unchanged, this poll can be a compact mark (and join a group commit): no further
        client views to compare and no cache hints or re-fetches to keep in a per-attempt row."""
        return not self.views and self.cache == CacheHints()


@dataclass
class PollOutcome:
    """What one recorded poll did, for the command line and the alerting that follows."""

    server: str
    ok: bool
    tool_count: int = 0
    fingerprint: str | None = None
    version: int | None = None
    new_version: bool = False
    findings: list[Finding] = field(default_factory=list)
    error_kind: str | None = None
    error: str | None = None
    view_errors: dict[str, str] = field(default_factory=dict)
    """Client views (by name) whose poll failed; the primary view's result stands."""
    listing_bytes: int = 0
    """The listing's compact-JSON size, as `Limits.max_bytes` counts it (0 when the poll failed)."""

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=None)


@dataclass(frozen=True)
class RecordedPoll:
    """One poll as its transaction recorded it: what the poll hooks act on, before it commits."""

    server: Server
    now: datetime
    findings: Sequence[FindingRecord]
    """Every finding this poll stored: the diff's, and the server rules' (unreachable, silent change)."""
    snapshot: Snapshot | None = None
    """The version the poll saw; None when the poll failed."""
    new_version: bool = False
    cleared: frozenset[Cleared] = frozenset()
    """What the rules judged for this poll found gone (`Rule.cleared`): their open alerts resolve."""
    views_agree: frozenset[str] = frozenset()
    """Tools that every client view now shows alike (after a view changed)."""
    listen_ack: bool = False
    """A watch session's listen acknowledgement, recorded instead of a poll (nothing was polled)."""
    was_failing: bool = True
    """Whether the server's previous poll failed: only then can a success resolve `server-unreachable`
    (False lets an unchanged poll of a healthy server skip looking for one)."""

    @property
    def ok(self) -> bool:
        return self.snapshot is not None

    @property
    def facts(self) -> PollFacts:
        """What the server rules that clear on a poll look at (`Rule.clears`)."""
        return PollFacts(
            answered=self.ok,
            was_failing=self.was_failing,
            new_version=self.new_version,
            raised=frozenset(finding.rule for finding in self.findings),
            cleared=self.cleared,
        )


def extras_changed(snapshot: Snapshot, poll: SuccessfulPoll) -> bool:
    """Whether what the version keeps outside its fingerprint (`_meta`, instructions) is not what the
    poll saw: the poll records it, and is no mark."""
    return metas_changed(snapshot, poll) or instructions_changed(snapshot, poll)


def instructions_changed(snapshot: Snapshot, poll: SuccessfulPoll) -> bool:
    return poll.instructions_digest is not None and snapshot.instructions_digest != poll.instructions_digest


def instructions_digest(instructions: str | None) -> str:
    """A digest of the instructions (of their absence too), to compare polls without the text."""
    return hashlib.sha256(json.dumps(instructions).encode("ascii")).hexdigest()


def metas_changed(snapshot: Snapshot, poll: SuccessfulPoll) -> bool:
    """Whether the poll's `_meta` is not what its version keeps: the poll records it, and is no mark."""
    return poll.metas_digest is not None and snapshot.metas_digest != poll.metas_digest


def seen_again(snapshot: Snapshot, poll: SuccessfulPoll) -> None:
    """The version's span after a poll that saw its listing again. A version stored before digests
    were kept (or first seen with its secrets redacted) takes this poll's digest: any text whose
    listing is the version's tells a restarted poller the same (`monitor.store.digests`)."""
    snapshot.last_seen = poll.finished_at
    snapshot.poll_count += 1
    if snapshot.listing_digest is None and poll.digest is not None:
        snapshot.listing_digest = poll.digest


def succeeded(server: Server, poll: SuccessfulPoll) -> None:
    """The server's state after a successful poll."""
    server.consecutive_failures = 0
    server.last_poll_at = server.last_success_at = poll.finished_at
    server.last_error = None
    if server.unverifiable_since is not None:  # a listing the monitor could store: verified again
        server.unverifiable_since = server.unverifiable_reason = None
    server.protocol_version = poll.protocol_version
    server.server_info = poll.server_info
    server.capabilities = poll.capabilities
    server.list_changed_advertised = poll.list_changed_advertised
    server.ttl_ms, server.cache_scope = poll.cache.ttl_ms, poll.cache.cache_scope
