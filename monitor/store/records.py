"""The record shapes of the read side, each defined once.

Queries return these, the JSON API answers with them as they are (their fields are the API's field
names), pages render them, and webhooks build their bodies from them. Ids the web layer needs to
ask further questions (a server's or a version's row id) are excluded from JSON and from the
OpenAPI document. A record never holds a server's headers or any other secret.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field
from pydantic.json_schema import SkipJsonSchema

from monitor.core.listing import offers_tools
from monitor.core.rules import Severity
from monitor.core.states import (
    OVERDUE_INTERVALS,
    AlertState,
    ApprovalMode,
    ResolveCause,
    ServerOrigin,
    ServerStatus,
)
from monitor.core.times import utc_text
from monitor.store.models import Alert, Silence

SEVERITIES: tuple[str, ...] = tuple(s.value for s in sorted(Severity, key=lambda s: -s.rank))
"""Severity names, worst first: the order every page and count lists them in."""

RowId = Annotated[SkipJsonSchema[int], Field(exclude=True)]
"""A database id the web layer uses to ask further questions; never part of an answer."""


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, from_attributes=True)


class SnapshotRecord(Record):
    """One version of a server's listing: the span of consecutive polls that saw the same listing."""

    id: RowId
    server_id: RowId
    listing_id: RowId
    version: int = Field(description="1 for the first listing seen, +1 for each different one after it")
    fingerprint: str = Field(description="SHA-256 of the canonical listing (docs/contract.md section 2)")
    first_seen: datetime
    last_seen: datetime
    poll_count: int = Field(description="Successful polls that saw this listing")
    tool_count: int
    protocol_version: str | None


class SnapshotListing(SnapshotRecord):
    """A version with the whole listing as the server sent it."""

    server: str
    server_info: dict[str, Any] | None
    tools: list[dict[str, Any]] = Field(description="The tools as the server sent them, `_meta` included")


def is_overdue(last_poll_at: datetime | None, interval: float, now: datetime) -> bool:
    """Polled once, and not within the last `OVERDUE_INTERVALS` intervals."""
    return last_poll_at is not None and (now - last_poll_at).total_seconds() > OVERDUE_INTERVALS * interval


class ServerRecord(Record):
    """A registered server with its current version and open alerts; never its headers."""

    id: RowId
    name: str
    transport: Literal["http", "sse", "stdio"]
    url: str | None = Field(description="With any password in the URL replaced by ***")
    command: str | None
    origin: ServerOrigin
    created_at: datetime
    last_poll_at: datetime | None
    last_success_at: datetime | None
    consecutive_failures: int
    last_error: str | None
    protocol_version: str | None
    server_info: dict[str, Any] | None
    capabilities: dict[str, Any] | None
    list_changed_advertised: bool | None
    watching_since: datetime | None = Field(
        description="Since when the monitor's long-lived watch session to the server has been up"
    )
    last_notification_at: datetime | None = Field(description="The last tools list-changed notification")
    era: str
    interval_seconds: float | None
    approval: ApprovalMode = Field(
        default=ApprovalMode.TOFU, description="What the decision point treats as approved"
    )
    has_headers: bool = Field(
        description="Whether request headers are stored; their values are never returned"
    )
    current: SnapshotRecord | None
    open_alerts: dict[str, int] = Field(description="Open alerts by severity")
    acknowledged_alerts: dict[str, int] = Field(
        default_factory=dict, description="Acknowledged alerts (seen, not yet resolved) by severity"
    )
    client: list[dict[str, Any]] | None = Field(
        default=None, description="The client profiles it is polled as; the first is its version history"
    )
    ttl_ms: int | None = Field(default=None, description="The current listing's ttlMs (2026-07-28)")
    cache_scope: str | None = Field(default=None, description="The current listing's cacheScope")
    tools_list_changed_honored: bool | None = Field(
        default=None,
        description="Whether the watch session's subscriptions/listen acknowledgement kept toolsListChanged",
    )
    aliases: list[str] | None = Field(
        default=None, description="Other names hosts know it by, set over the API (see also the config)"
    )
    unverifiable_reason: str | None = Field(
        default=None,
        description="Why the server's newest answer was refused, while it is: every decision about it "
        "is deny until a listing the monitor can store arrives",
    )

    overdue: bool = Field(
        default=False,
        description="No poll attempt for more than three of its intervals: nothing is polling it (an "
        "instance with another config registered it, or the scheduler stopped)",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> ServerStatus:
        """Never polled; failing (its last poll failed); overdue (no recent poll: its last answer is
        old news); else ok."""
        if self.last_poll_at is None:
            return ServerStatus.NEVER_POLLED
        if self.consecutive_failures > 0:
            return ServerStatus.FAILING
        if self.overdue:
            return ServerStatus.OVERDUE
        if self.capabilities is not None and not offers_tools(self.capabilities):
            return ServerStatus.NO_TOOLS
        return ServerStatus.OK

    def as_of(self, now: datetime, default_interval: float) -> ServerRecord:
        """The record with `overdue` as of `now` (its own interval, else the configured one)."""
        return self.model_copy(
            update={"overdue": is_overdue(self.last_poll_at, self.interval_seconds or default_interval, now)}
        )

    @property
    def worst_open_rank(self) -> int:
        """The rank of the worst severity with an open alert; -1 when none is open."""
        return max((Severity(s).rank for s, n in self.open_alerts.items() if n > 0), default=-1)

    @property
    def worst_unresolved_rank(self) -> int:
        """As `worst_open_rank`, counting acknowledged alerts too: seen is not fixed."""
        counts = [*self.open_alerts.items(), *self.acknowledged_alerts.items()]
        return max((Severity(s).rank for s, n in counts if n > 0), default=-1)


class FindingFields(Record):
    """What a finding says, whether just computed by the diff engine or read from storage."""

    rule: str
    severity: Severity
    tool: str | None
    field: str | None
    old: Any
    new: Any
    message: str
    detail: Any

    @property
    def rank(self) -> int:
        return self.severity.rank


class ChangeRecord(FindingFields):
    """A stored finding, with the server and the versions it was found between."""

    id: int
    server: str
    detected_at: datetime
    from_version: int | None = Field(description="The version changed from; null for server findings")
    to_version: int | None
    silence_id: int | None = Field(default=None, description="The silence that muted it: stored, no alert")


class ToolVersionRecord(Record):
    """A run of consecutive server versions in which one tool kept one definition (or was absent)."""

    from_version: int = Field(description="First server version with this definition")
    to_version: int = Field(description="Last server version with this definition")
    first_seen: datetime
    last_seen: datetime
    fingerprint: str | None = Field(description="SHA-256 of the tool's canonical JSON")
    definition: dict[str, Any] | None
    findings: list[ChangeRecord] = Field(description="What changed at the step into this version")

    @computed_field(  # type: ignore[prop-decorator]
        description="False for a run of versions in which the tool was absent"
    )
    @property
    def present(self) -> bool:
        return self.definition is not None


def resolution(state: str, cause: str | None, by: str | None, note: str | None) -> str | None:
    """One sentence for why an alert ended: "approved by alice as in v3", "resolved by bob: host
    retired", "silenced by carol until 2026-12-04 09:00:00 UTC: a planned migration", "the
    condition cleared" (docs/contract.md section 13). A cause an approval or silence recorded leads
    its note."""
    if state != AlertState.RESOLVED:
        return None
    if by is None or cause in (None, ResolveCause.CLEARED):
        return "the condition cleared"
    if cause == ResolveCause.SILENCED and note:
        return f"silenced by {by}{_silence_end(note).removeprefix('silenced')}"
    if cause == ResolveCause.APPROVED and note:
        return f"approved by {by}{note.removeprefix('approved')}"
    return f"resolved by {by}" + (f": {note}" if note else "")


def _silence_end(note: str) -> str:
    """A silence's note with its end as people read it (`utc_text`): earlier releases wrote it in ISO
    8601, with microseconds ("silenced until 2026-12-04T09:00:00.123456Z: why")."""
    head, colon, why = note.partition(": ")
    written = head.removeprefix("silenced until ")
    if written == head:
        return note
    try:
        until = datetime.fromisoformat(written.replace("Z", "+00:00"))
    except ValueError:
        return note  # this release's own form, or not a time at all
    return f"silenced until {utc_text(until if until.tzinfo else until.replace(tzinfo=UTC))}{colon}{why}"


class AlertRecord(Record):
    """An alert with its server's name and how many findings it gathered."""

    id: int
    server: str
    rule: str
    severity: Severity
    tool: str | None
    session_id: str | None
    state: AlertState
    message: str
    opened_at: datetime
    last_seen_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    finding_count: int
    acknowledged_by: str | None = None
    ack_note: str | None = None
    resolved_by: str | None = Field(default=None, description="Who resolved it by hand; null when it cleared")
    resolve_note: str | None = None
    resolve_cause: ResolveCause | None = Field(
        default=None, description="Why it was resolved; null until then"
    )
    silenced_until: datetime | None = Field(
        default=None, description="Unresolved and matched by an active silence: until when (else null)"
    )
    silenced_by: str | None = Field(default=None, description="Who made that silence")

    @computed_field(description="The cause of its resolution in words (null while unresolved)")  # type: ignore[prop-decorator]
    @property
    def resolution(self) -> str | None:
        return resolution(self.state, self.resolve_cause, self.resolved_by, self.resolve_note)

    @classmethod
    def of(cls, alert: Alert, *, server: str, finding_count: int) -> AlertRecord:
        """The record of an alert row at hand (the queries read the same shape in one statement)."""
        columns = {name: getattr(alert, name) for name in cls.model_fields if hasattr(Alert, name)}
        return cls.model_validate({**columns, "server": server, "finding_count": finding_count})


class DeliveryRecord(Record):
    """One webhook delivery of an alert event, from the outbox: its state and how often it was tried."""

    id: str = Field(description="The `webhook-id` header, stable across retries")
    webhook: str
    event_type: str
    state: str
    created_at: datetime
    attempts: int
    delivered_at: datetime | None
    last_error: str | None


class AlertDetail(Record):
    """Everything the alert's own page (`/alerts/{id}`, the webhooks' `url`) shows."""

    alert: AlertRecord
    findings: list[ChangeRecord]
    deliveries: list[DeliveryRecord]


class SilenceRecord(Record):
    """A silence: which findings it mutes (a null field matches anything), until when, who and why."""

    id: int
    server: str | None
    tool: str | None
    rule: str | None
    ends_at: datetime
    created_by: str
    reason: str
    created_at: datetime
    active: bool = Field(description="Whether it mutes findings now")

    @classmethod
    def of(cls, silence: Silence, now: datetime) -> SilenceRecord:
        columns = {name: getattr(silence, name) for name in cls.model_fields if name != "active"}
        return cls.model_validate({**columns, "active": silence.created_at <= now < silence.ends_at})


class SessionRecord(Record):
    """A host session and whether the listing it cached is still the server's current one."""

    server: str
    session_id: str
    client: str | None
    connected_at: datetime
    last_heartbeat_at: datetime
    fingerprint: str
    current_fingerprint: str | None
    stale: bool
    """Holds another listing than the server's current one for longer than the grace period."""
    stale_since: datetime | None
    client_capabilities: dict[str, Any] | None = None


class UnmonitoredRecord(Record):
    """A server name a host asked about that no monitored server has: a gap in what is gated."""

    name: str
    host: str = Field(description="The adapter that was asked: claude-code, codex, gemini-cli, toolhive")
    first_seen: datetime
    last_seen: datetime
    calls: int
