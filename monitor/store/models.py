"""The database schema as SQLAlchemy models. Alembic migrations create it; a test keeps them equal.

Listings and tool definitions are content-addressed and shared, so a change to one tool of 500
stores one tool. A snapshot is a *version* of one server: a span of consecutive polls that saw the
same listing, so an unchanged poll only moves `last_seen` and `poll_count`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    ScalarSelect,
    String,
    Text,
    UniqueConstraint,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute, Mapped, aliased, mapped_column

from monitor.store.columns import JSONValue, SafeText, UTCDateTime


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSONValue,
        Any: JSONValue,
        datetime: UTCDateTime(),
    }


class Server(Base):
    """A registered MCP server and its current state.

    Secrets from config files (headers, env) are never stored; only servers registered over the API
    keep their headers here, because they are needed to poll, and no response ever returns them.
    """

    __tablename__ = "servers"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    transport: Mapped[str] = mapped_column(String(10))
    url: Mapped[str | None] = mapped_column(Text)
    command: Mapped[str | None] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(10))
    """`config` (from a config file) or `api` (registered over HTTP)."""
    created_at: Mapped[datetime]
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    last_poll_at: Mapped[datetime | None]
    last_success_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    protocol_version: Mapped[str | None] = mapped_column(String(40))
    server_info: Mapped[dict[str, Any] | None]
    capabilities: Mapped[dict[str, Any] | None]
    list_changed_advertised: Mapped[bool | None] = mapped_column(Boolean)
    era: Mapped[str] = mapped_column(String(10), default="handshake", server_default="handshake")
    headers: Mapped[dict[str, Any] | None]
    """Request headers of a server registered over the API (secrets): used to poll, never returned."""
    interval_seconds: Mapped[float | None] = mapped_column(Float)
    """The server's own poll interval; None means the monitor's default."""
    next_poll_at: Mapped[datetime | None]
    """When the server is next due. Advanced when a poll is claimed, so no interval is polled twice."""
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime | None]
    """While a lease is live only its owner polls the server; a dead owner's lease simply runs out."""
    watch_connected_since: Mapped[datetime | None]
    """Since when the monitor's long-lived watch session has been healthy; None while it is down."""
    last_notification_at: Mapped[datetime | None]
    """When the watch session last received a tools list-changed notification."""
    polls_marked: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Unchanged polls recorded as compact marks so far: the next one's slot in the server's ring."""
    approval: Mapped[str] = mapped_column(String(10), default="tofu", server_default="tofu")
    """`tofu`, `review` or `off` (docs/contract.md section 10): what the decision point treats as approved."""
    client: Mapped[Any | None]
    """The client profiles of a server registered over the API (`[{name, version, capabilities}]`)."""
    ttl_ms: Mapped[int | None] = mapped_column(BigInteger)
    """The current listing's `ttlMs` (2026-07-28): hosts may keep it this long. Outside the fingerprint."""
    cache_scope: Mapped[str | None] = mapped_column(String(20))
    tools_list_changed_honored: Mapped[bool | None] = mapped_column(Boolean)
    """Whether the watch session's `subscriptions/listen` acknowledgement kept `toolsListChanged`."""
    flapping_alert_possible: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    """Whether a `listing-flapping` alert may be open: set by the transaction that opens one, cleared
    by a poll that finds none. False (nearly every server) spares each poll looking for one."""
    decision_generation: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Moved by every transaction that changes what decisions about the server's tools rest on (a new
    version, an approval, a revocation, a mode): decision caches compare it, in commit order."""
    unverifiable_since: Mapped[datetime | None]
    """Since when the server's answers are listings the monitor refused to store (malformed, over a
    limit): every decision about it is `deny` until a valid listing arrives. None otherwise."""
    unverifiable_reason: Mapped[str | None] = mapped_column(Text)
    aliases: Mapped[Any | None]
    """Other names hosts know a server registered over the API by (config servers list theirs in the
    config file)."""

    __table_args__ = (Index("ix_servers_next_poll_at", "next_poll_at"),)


class ToolDefinition(Base):
    """One distinct tool definition (without `_meta`), stored once whichever listings hold it."""

    __tablename__ = "tool_definitions"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(SafeText)
    definition: Mapped[dict[str, Any]]

    __table_args__ = (Index("ix_tool_definitions_name", "name"),)


class Listing(Base):
    """One distinct listing, addressed by its fingerprint."""

    __tablename__ = "listings"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    tool_count: Mapped[int]
    created_at: Mapped[datetime]


class ListingTool(Base):
    """Membership of a tool definition in a listing (shared by every server that serves the listing:
    each version keeps its own server's `_meta`, `Snapshot.metas`)."""

    __tablename__ = "listing_tools"

    listing_id: Mapped[int] = mapped_column(ForeignKey("listings.id", ondelete="CASCADE"), primary_key=True)
    tool_id: Mapped[int] = mapped_column(ForeignKey("tool_definitions.id"), primary_key=True)
    position: Mapped[int]

    __table_args__ = (Index("ix_listing_tools_tool_id", "tool_id"),)


class Snapshot(Base):
    """A version of one server's listing: the span of consecutive polls that saw it."""

    __tablename__ = "snapshots"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    version: Mapped[int]
    listing_id: Mapped[int] = mapped_column(ForeignKey("listings.id"))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    poll_count: Mapped[int] = mapped_column(Integer, default=1)
    protocol_version: Mapped[str | None] = mapped_column(String(40))
    server_info: Mapped[dict[str, Any] | None]
    validation_errors: Mapped[Any | None]
    """Why hosts would reject this listing (MCP schema violations), or None when it is valid."""
    listing_digest: Mapped[bytes | None] = mapped_column(LargeBinary(32))
    """SHA-256 of a JSON text the server sent for this listing (`FetchedListing.digest`), so a
    restarted poller knows it without indexing it again; None when no poll of the version had one."""
    metas: Mapped[dict[str, Any] | None]
    """Tool name -> `_meta`, as the server last sent it for this version (outside the fingerprint)."""
    metas_digest: Mapped[str | None] = mapped_column(String(64))
    """`metas_digest(metas)`: whether a poll's `_meta` changed; None before any poll recorded it."""
    instructions: Mapped[str | None] = mapped_column(SafeText)
    """The instructions the server gives hosts (outside the fingerprint), as last sent for this version."""
    instructions_digest: Mapped[str | None] = mapped_column(String(64))
    """`instructions_digest(instructions)`: whether a poll's instructions changed; None before any poll
    recorded them."""

    __table_args__ = (
        UniqueConstraint("server_id", "version", name="uq_snapshots_server_id_version"),
        # "Which listing was in force at T": the newest span of the server starting at or before T.
        Index("ix_snapshots_server_id_first_seen", "server_id", "first_seen"),
        Index("ix_snapshots_listing_id", "listing_id"),
    )


def newest_version(server_id: ColumnElement[int] | InstrumentedAttribute[int]) -> ScalarSelect[int]:
    """The number of `server_id`'s newest version, correlated to the query it is used in."""
    older = aliased(Snapshot)
    return (
        select(func.max(older.version))
        .where(older.server_id == server_id)
        .correlate_except(older)
        .scalar_subquery()
    )


class FindingRecord(Base):
    """A finding, with the pair of snapshots it came from (none for server and session findings)."""

    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    from_snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id"))
    to_snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id"))
    detected_at: Mapped[datetime]
    rule: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(10))
    severity_rank: Mapped[int]
    tool: Mapped[str | None] = mapped_column(SafeText)
    field: Mapped[str | None] = mapped_column(SafeText)
    old: Mapped[Any | None]
    new: Mapped[Any | None]
    message: Mapped[str] = mapped_column(SafeText)
    detail: Mapped[Any | None]
    silence_id: Mapped[int | None]
    """The silence (`silences.id`; silences end, they are never deleted) that muted this finding when
    it was found: stored and shown, but it opened no alert."""

    __table_args__ = (
        Index("ix_findings_server_id_detected_at", "server_id", "detected_at"),
        Index("ix_findings_detected_at", "detected_at"),
        Index("ix_findings_to_snapshot_id", "to_snapshot_id"),
    )


class PollAttempt(Base):
    """One poll: every failure is kept, successes only the most recent few per server."""

    __tablename__ = "poll_attempts"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    started_at: Mapped[datetime]
    duration_ms: Mapped[float] = mapped_column(Float)
    ok: Mapped[bool] = mapped_column(Boolean)
    error_kind: Mapped[str | None] = mapped_column(String(20))
    error: Mapped[str | None] = mapped_column(Text)
    snapshot_id: Mapped[int | None] = mapped_column(ForeignKey("snapshots.id", ondelete="SET NULL"))
    pages: Mapped[int | None]
    raw_payload: Mapped[str | None] = mapped_column(Text)
    """For a listing that could not be read: the start of what the server sent, for review."""
    ttl_ms: Mapped[int | None] = mapped_column(BigInteger)
    cache_scope: Mapped[str | None] = mapped_column(String(20))
    refetches: Mapped[int | None]
    """How often the listing was fetched again from its first page because its pages straddled a change."""

    __table_args__ = (Index("ix_poll_attempts_server_id_ok_id", "server_id", "ok", "id"),)


class PollMark(Base):
    """An unchanged successful poll, kept compact: the common case, so it must cost almost nothing.

    A poll that saw the listing its server's current version already holds adds no information but
    when it ran and how long it took. Each server keeps a ring of `attempts_kept` such rows (the slot
    is `Server.polls_marked` modulo that), rewritten in place: about 20 bytes each on SQLite (no
    rowid, integer epoch), and nothing more once a server's ring is full. Failures and new versions
    keep their full `PollAttempt` row.
    """

    __tablename__ = "poll_marks"

    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"), primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    started_ms: Mapped[int] = mapped_column(BigInteger)
    """When the poll started, in milliseconds since the Unix epoch (UTC)."""
    duration_ms: Mapped[int] = mapped_column(Integer)

    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 - SQLAlchemy's table options


class Alert(Base):
    """An alert: one per (server, tool or session, rule) while open; repeat findings attach to it."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    rule: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(10))
    severity_rank: Mapped[int]
    tool: Mapped[str | None] = mapped_column(SafeText)
    session_id: Mapped[str | None] = mapped_column(SafeText)
    state: Mapped[str] = mapped_column(String(12))
    """open, acknowledged or resolved."""
    open_key: Mapped[str | None] = mapped_column(SafeText, unique=True)
    """`server_id/rule/sha256(tool, session)` while the alert is unresolved, NULL after: no alert storms."""
    message: Mapped[str] = mapped_column(SafeText)
    opened_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]
    acknowledged_at: Mapped[datetime | None]
    resolved_at: Mapped[datetime | None]
    clear_since: Mapped[datetime | None]
    """When a re-checked condition was first seen clear; it resolves once clear for a full check."""
    acknowledged_by: Mapped[str | None] = mapped_column(Text)
    ack_note: Mapped[str | None] = mapped_column(Text)
    resolved_by: Mapped[str | None] = mapped_column(Text)
    """Who resolved it by hand; None when its condition cleared."""
    resolve_note: Mapped[str | None] = mapped_column(Text)
    resolve_cause: Mapped[str | None] = mapped_column(String(16))
    """Why it was resolved (`monitor.core.states.ResolveCause`); None while unresolved."""

    __table_args__ = (
        Index("ix_alerts_state_opened_at", "state", "opened_at"),
        Index("ix_alerts_server_id_state", "server_id", "state"),
    )


class AlertFinding(Base):
    __tablename__ = "alert_findings"

    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id", ondelete="CASCADE"), primary_key=True)
    finding_id: Mapped[int] = mapped_column(ForeignKey("findings.id", ondelete="CASCADE"), primary_key=True)


class WebhookDelivery(Base):
    """The outbox: a delivery is a row before it is attempted, so a restart loses none."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    """The `webhook-id` header: stable across retries, so receivers can deduplicate."""
    webhook: Mapped[str] = mapped_column(String(200))
    alert_id: Mapped[int | None] = mapped_column(ForeignKey("alerts.id", ondelete="SET NULL"))
    event_type: Mapped[str] = mapped_column(String(40))
    body: Mapped[str] = mapped_column(Text)
    """The exact bytes that are signed and sent, fixed when the delivery is enqueued."""
    state: Mapped[str] = mapped_column(String(12))
    """pending, delivered or expired."""
    created_at: Mapped[datetime]
    next_attempt_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivered_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_expires_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_webhook_deliveries_state_next_attempt_at", "state", "next_attempt_at"),)


class DeliveryAttempt(Base):
    __tablename__ = "delivery_attempts"

    id: Mapped[int] = mapped_column(primary_key=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"))
    attempted_at: Mapped[datetime]
    status_code: Mapped[int | None]
    latency_ms: Mapped[float] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_delivery_attempts_delivery_id", "delivery_id"),)


class HostSession(Base):
    """A session a host or gateway holds with a server, and the fingerprint of the listing it cached."""

    __tablename__ = "host_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(String(200))
    client: Mapped[str | None] = mapped_column(SafeText)
    connected_at: Mapped[datetime]
    last_heartbeat_at: Mapped[datetime]
    fingerprint: Mapped[str] = mapped_column(String(64))
    fingerprint_since: Mapped[datetime]
    """When the session reported its current fingerprint: the grace period counts from here."""
    client_capabilities: Mapped[dict[str, Any] | None]
    """The capabilities the host declared to the server: the session is compared with that view."""

    __table_args__ = (
        UniqueConstraint("server_id", "session_id", name="uq_host_sessions_server_id_session_id"),
    )


class Silence(Base):
    """A mute, as in Alertmanager: findings matching server, tool and rule open no alert until `ends_at`.

    A field left None matches anything. Muted findings are still stored (marked with the silence);
    a silence that ends resolves nothing by itself.
    """

    __tablename__ = "silences"

    id: Mapped[int] = mapped_column(primary_key=True)
    server: Mapped[str | None] = mapped_column(String(200))
    tool: Mapped[str | None] = mapped_column(SafeText)
    rule: Mapped[str | None] = mapped_column(String(64))
    ends_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(SafeText)
    reason: Mapped[str] = mapped_column(SafeText)
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_silences_ends_at", "ends_at"),)


class ClientView(Base):
    """What one client profile of a server was shown: a span of polls that saw one listing, as a
    snapshot is for the server's primary profile. Views of one server are compared with each other."""

    __tablename__ = "client_views"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    profile: Mapped[str] = mapped_column(String(200))
    client: Mapped[dict[str, Any]]
    listing_id: Mapped[int] = mapped_column(ForeignKey("listings.id"))
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    poll_count: Mapped[int]

    __table_args__ = (
        Index("ix_client_views_server_id_profile_first_seen", "server_id", "profile", "first_seen"),
        Index("ix_client_views_listing_id", "listing_id"),
    )


class DecisionNames(Base):
    """One row whose `generation` moves with every server registered or deleted and every alias
    changed, so that each process's map of names to servers follows commit order; and whose
    `tokens_generation` moves with every named token created or revoked, for its map of tokens."""

    __tablename__ = "decision_names"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)
    tokens_generation: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class Installation(Base):
    """This database's identity, made once (migration 0019) and kept: receivers several monitors share
    (one PagerDuty service) tell their alerts apart by it."""

    __tablename__ = "installation"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime]
    first_keyed_alert: Mapped[int] = mapped_column(BigInteger)
    """Alerts numbered below this were announced before 0019, under their bare id: they keep it."""
