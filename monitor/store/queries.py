"""Read-side queries for the web layer: every page and endpoint reads storage through these.

Each function takes an open Session and issues a few indexed statements; nothing here writes or
re-derives findings. Findings of consecutive versions are read as stored; a diff between two
arbitrary versions runs the one diff engine (`monitor.core.diff.diff_listings`) over the stored tools.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import and_, case, func, literal, or_, select
from sqlalchemy.orm import Session, aliased

from monitor.core.diff import diff_listings
from monitor.core.rules import Finding, Severity
from monitor.store.models import (
    Alert,
    AlertFinding,
    FindingRecord,
    Listing,
    ListingTool,
    PollAttempt,
    Server,
    Snapshot,
    ToolDefinition,
    WebhookDelivery,
)

SEVERITIES: tuple[str, ...] = tuple(s.value for s in sorted(Severity, key=lambda s: -s.rank))
"""Severity names, worst first: the order every page lists them in."""

AlertState = Literal["open", "acknowledged", "resolved"]
ServerStatus = Literal["ok", "failing", "never polled"]


# --- rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotRow:
    """One version of a server's listing (a span of polls that saw the same listing)."""

    id: int
    server_id: int
    version: int
    listing_id: int
    fingerprint: str
    tool_count: int
    first_seen: datetime
    last_seen: datetime
    poll_count: int
    protocol_version: str | None
    server_info: dict[str, Any] | None


@dataclass(frozen=True)
class ServerRow:
    """A server with its current version and open alerts; never its headers."""

    id: int
    name: str
    transport: str
    url: str | None
    command: str | None
    origin: str
    created_at: datetime
    last_poll_at: datetime | None
    last_success_at: datetime | None
    consecutive_failures: int
    last_error: str | None
    protocol_version: str | None
    server_info: dict[str, Any] | None
    capabilities: dict[str, Any] | None
    list_changed_advertised: bool | None
    watching_since: datetime | None
    last_notification_at: datetime | None
    era: str
    interval_seconds: float | None
    has_headers: bool
    current: SnapshotRow | None
    open_alerts: dict[str, int]

    @property
    def status(self) -> ServerStatus:
        if self.last_poll_at is None:
            return "never polled"
        return "failing" if self.consecutive_failures > 0 else "ok"

    @property
    def open_alert_items(self) -> list[tuple[str, int]]:
        """(severity, count) of open alerts, worst first, zeros left out."""
        return [(s, n) for s, n in self.open_alerts.items() if n]

    @property
    def worst_open_rank(self) -> int:
        ranks = [Severity(s).rank for s, n in self.open_alerts.items() if n > 0]
        return max(ranks, default=-1)


@dataclass(frozen=True)
class ChangeRow:
    """A stored finding with the server and versions it belongs to."""

    id: int
    server: str
    detected_at: datetime
    rule: str
    severity: str
    tool: str | None
    field: str | None
    old: Any
    new: Any
    message: str
    detail: Any
    from_version: int | None
    to_version: int | None


@dataclass(frozen=True)
class AlertRow:
    id: int
    server: str
    rule: str
    severity: str
    tool: str | None
    session_id: str | None
    state: str
    message: str
    opened_at: datetime
    last_seen_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    finding_count: int


@dataclass(frozen=True)
class FindingView:
    """A finding as pages show it, whether read from storage or computed by the diff engine."""

    rule: str
    severity: str
    tool: str | None
    field: str | None
    old: Any
    new: Any
    message: str
    detail: Any

    @classmethod
    def of(cls, finding: Finding) -> FindingView:
        return cls(
            finding.rule,
            finding.severity.value,
            finding.tool,
            finding.field,
            finding.old,
            finding.new,
            finding.message,
            finding.detail,
        )

    @property
    def rank(self) -> int:
        return Severity(self.severity).rank


@dataclass
class ToolChangeView:
    """One tool that differs between two versions: both definitions and the findings about it."""

    name: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    findings: list[FindingView] = field(default_factory=list)

    @property
    def worst(self) -> str | None:
        worst = max(self.findings, key=lambda f: f.rank, default=None)
        return worst.severity if worst else None


@dataclass(frozen=True)
class DiffView:
    old: SnapshotRow
    new: SnapshotRow
    tools: list[ToolChangeView]
    stored: bool
    """True when the findings are the ones recorded when the change was detected (adjacent versions)."""


@dataclass
class ToolVersion:
    """A run of consecutive server versions in which one tool kept one definition (or was absent)."""

    from_version: int
    to_version: int
    first_seen: datetime
    last_seen: datetime
    fingerprint: str | None
    definition: dict[str, Any] | None
    findings: list[ChangeRow] = field(default_factory=list)

    @property
    def present(self) -> bool:
        return self.definition is not None


@dataclass(frozen=True)
class MetricsData:
    polls_ok: int
    polls_failed: int
    servers_by_status: dict[str, int]
    alerts: dict[tuple[str, str], int]
    """(state, severity) -> count, for open and acknowledged alerts."""
    pending_deliveries: int
    oldest_pending_delivery: datetime | None
    recent_durations_ms: list[float]
    snapshot_versions: int


# --- helpers ---------------------------------------------------------------------------------


def redact_url(url: str | None) -> str | None:
    """The URL without a password in its userinfo: URLs are shown, credentials never."""
    if not url or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _snapshot_columns(*, with_info: bool = False) -> tuple[Any, ...]:
    """The columns of a SnapshotRow; `server_info` (JSON) only where a single version is shown."""
    return (
        Snapshot.id,
        Snapshot.server_id,
        Snapshot.version,
        Snapshot.listing_id,
        Listing.fingerprint,
        Listing.tool_count,
        Snapshot.first_seen,
        Snapshot.last_seen,
        Snapshot.poll_count,
        Snapshot.protocol_version,
        Snapshot.server_info if with_info else literal(None),
    )


def _snapshot_row(row: Sequence[Any]) -> SnapshotRow:
    return SnapshotRow(*row[:11])


# --- servers ---------------------------------------------------------------------------------


def server_id(session: Session, name: str) -> int | None:
    return session.scalar(select(Server.id).where(Server.name == name))


def current_snapshots(session: Session, server_ids: Iterable[int] | None = None) -> dict[int, SnapshotRow]:
    """The newest version of each server, read through the (server_id, version) unique index."""
    latest = select(Snapshot.server_id, func.max(Snapshot.version).label("version"))
    if server_ids is not None:
        latest = latest.where(Snapshot.server_id.in_(list(server_ids)))
    newest = latest.group_by(Snapshot.server_id).subquery()
    rows = session.execute(
        select(*_snapshot_columns())
        .join(Listing, Listing.id == Snapshot.listing_id)
        .join(
            newest,
            and_(Snapshot.server_id == newest.c.server_id, Snapshot.version == newest.c.version),
        )
    ).all()
    return {row[1]: _snapshot_row(row) for row in rows}


def open_alert_counts(session: Session, server_ids: Iterable[int] | None = None) -> dict[int, dict[str, int]]:
    """Open (not acknowledged, not resolved) alerts per server and severity."""
    query = select(Alert.server_id, Alert.severity, func.count()).where(Alert.state == "open")
    if server_ids is not None:
        query = query.where(Alert.server_id.in_(list(server_ids)))
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for sid, severity, count in session.execute(query.group_by(Alert.server_id, Alert.severity)):
        counts[sid][severity] = int(count)
    return counts


_SERVER_COLUMNS = (
    Server.id,
    Server.name,
    Server.transport,
    Server.url,
    Server.command,
    Server.origin,
    Server.created_at,
    Server.last_poll_at,
    Server.last_success_at,
    Server.consecutive_failures,
    Server.last_error,
    Server.protocol_version,
    Server.server_info,
    Server.capabilities,
    Server.list_changed_advertised,
    Server.watch_connected_since,
    Server.last_notification_at,
    Server.era,
    Server.interval_seconds,
    Server.headers,
)
"""Plain columns rather than ORM objects: the overview reads hundreds of servers per request."""


def _server_row(row: Any, current: SnapshotRow | None, alerts: dict[str, int]) -> ServerRow:
    return ServerRow(
        id=row.id,
        name=row.name,
        transport=row.transport,
        url=redact_url(row.url),
        command=row.command,
        origin=row.origin,
        created_at=row.created_at,
        last_poll_at=row.last_poll_at,
        last_success_at=row.last_success_at,
        consecutive_failures=row.consecutive_failures or 0,
        last_error=row.last_error,
        protocol_version=row.protocol_version,
        server_info=row.server_info,
        capabilities=row.capabilities,
        list_changed_advertised=row.list_changed_advertised,
        watching_since=row.watch_connected_since,
        last_notification_at=row.last_notification_at,
        era=row.era,
        interval_seconds=row.interval_seconds,
        has_headers=bool(row.headers),
        current=current,
        open_alerts={s: alerts.get(s, 0) for s in SEVERITIES},
    )


def servers(session: Session, *, limit: int | None = None, after: str | None = None) -> list[ServerRow]:
    """Servers by name, each with its current version and open alerts (three statements in all)."""
    query = select(*_SERVER_COLUMNS).order_by(Server.name)
    if after is not None:
        query = query.where(Server.name > after)
    if limit is not None:
        query = query.limit(limit)
    rows = session.execute(query).all()
    ids = [r.id for r in rows] if limit is not None or after is not None else None
    currents = current_snapshots(session, ids)
    alerts = open_alert_counts(session, ids)
    return [_server_row(r, currents.get(r.id), alerts.get(r.id, {})) for r in rows]


def server(session: Session, name: str) -> ServerRow | None:
    row = session.execute(select(*_SERVER_COLUMNS).where(Server.name == name)).first()
    if row is None:
        return None
    current = current_snapshots(session, [row.id]).get(row.id)
    return _server_row(row, current, open_alert_counts(session, [row.id]).get(row.id, {}))


def server_names(session: Session) -> list[str]:
    return list(session.scalars(select(Server.name).order_by(Server.name)))


# --- snapshots -------------------------------------------------------------------------------


def snapshots(
    session: Session, server_id: int, *, limit: int, before: int | None = None
) -> list[SnapshotRow]:
    """Versions newest first; `before` is a version number (exclusive)."""
    query = (
        select(*_snapshot_columns())
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version.desc())
        .limit(limit)
    )
    if before is not None:
        query = query.where(Snapshot.version < before)
    return [_snapshot_row(row) for row in session.execute(query)]


def snapshot(session: Session, server_id: int, version: int) -> SnapshotRow | None:
    row = session.execute(
        select(*_snapshot_columns(with_info=True))
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id, Snapshot.version == version)
    ).first()
    return _snapshot_row(row) if row else None


@dataclass(frozen=True)
class InForce:
    """The answer to "what listing did this server serve at T": the version and its neighbourhood."""

    snapshot: SnapshotRow
    superseded_at: datetime | None
    """When the next version was first seen; None while this one is the newest."""


def snapshot_at(session: Session, name: str, at: datetime) -> InForce | None:
    """One statement on the (server_id, first_seen) index: the newest span starting at or before `at`."""
    following = aliased(Snapshot)
    next_start = (
        select(following.first_seen)
        .where(following.server_id == Snapshot.server_id, following.version == Snapshot.version + 1)
        .scalar_subquery()
    )
    row = session.execute(
        select(*_snapshot_columns(), next_start)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .join(Server, Server.id == Snapshot.server_id)
        .where(Server.name == name, Snapshot.first_seen <= at)
        .order_by(Snapshot.first_seen.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return InForce(_snapshot_row(row), row[11])


def first_snapshot_time(session: Session, server_id: int) -> datetime | None:
    return session.scalar(select(func.min(Snapshot.first_seen)).where(Snapshot.server_id == server_id))


def listing_tools(session: Session, listing_id: int) -> list[dict[str, Any]]:
    """The listing's tools as the server sent them (`_meta` restored), in the order first received."""
    rows = session.execute(
        select(ToolDefinition.definition, ListingTool.meta)
        .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
        .where(ListingTool.listing_id == listing_id)
        .order_by(ListingTool.position)
    ).all()
    return [definition if meta is None else {**definition, "_meta": meta} for definition, meta in rows]


# --- diffs and tool history ------------------------------------------------------------------


def _members(session: Session, listing_id: int) -> dict[str, int]:
    """Tool name -> tool definition id of one listing: enough to see which tools changed."""
    return dict(
        session.execute(
            select(ToolDefinition.name, ToolDefinition.id)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == listing_id)
        ).all()
    )


def _definitions(session: Session, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    wanted = sorted(set(ids))
    found: dict[int, dict[str, Any]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        found.update(
            session.execute(
                select(ToolDefinition.id, ToolDefinition.definition).where(ToolDefinition.id.in_(chunk))
            ).all()
        )
    return found


def diff(session: Session, server_id: int, old_version: int, new_version: int) -> DiffView | None:
    """The changed tools between two versions of one server, with findings about each.

    Only tools whose stored definition differs are loaded. Consecutive versions show the findings
    stored when the change was detected; other pairs run the diff engine over the changed tools
    (a tool identical on both sides can yield no finding, so leaving it out changes nothing).
    """
    old = snapshot(session, server_id, old_version)
    new = snapshot(session, server_id, new_version)
    if old is None or new is None:
        return None
    old_members = _members(session, old.listing_id)
    new_members = _members(session, new.listing_id)
    changed = sorted(
        name
        for name in old_members.keys() | new_members.keys()
        if old_members.get(name) != new_members.get(name)
    )
    definitions = _definitions(
        session,
        [old_members[n] for n in changed if n in old_members]
        + [new_members[n] for n in changed if n in new_members],
    )
    tools = {
        name: ToolChangeView(
            name,
            definitions.get(old_members[name]) if name in old_members else None,
            definitions.get(new_members[name]) if name in new_members else None,
        )
        for name in changed
    }
    stored = new.version == old.version + 1
    findings: list[FindingView]
    if stored:
        records = session.scalars(
            select(FindingRecord)
            .where(FindingRecord.from_snapshot_id == old.id, FindingRecord.to_snapshot_id == new.id)
            .order_by(FindingRecord.severity_rank.desc(), FindingRecord.id)
        )
        findings = [
            FindingView(r.rule, r.severity, r.tool, r.field, r.old, r.new, r.message, r.detail)
            for r in records
        ]
    elif old.id == new.id:
        findings = []
    else:
        old_tools = [t.old for t in tools.values() if t.old is not None]
        new_tools = [t.new for t in tools.values() if t.new is not None]
        findings = [FindingView.of(f) for f in diff_listings(old_tools, new_tools).findings]
    for finding in findings:
        if finding.tool is not None:
            tools.setdefault(finding.tool, ToolChangeView(finding.tool, None, None)).findings.append(finding)
    ordered = sorted(tools.values(), key=lambda t: (-max((f.rank for f in t.findings), default=-1), t.name))
    return DiffView(old, new, ordered, stored)


def tool_history(session: Session, server_id: int, tool: str) -> list[ToolVersion]:
    """Every definition one tool had, oldest first, with the findings recorded at each step.

    Consecutive server versions holding the same definition form one tool version; versions in
    which the tool was absent form a run without a definition (removed, perhaps added back later).
    """
    spans = session.execute(
        select(Snapshot.id, Snapshot.version, Snapshot.listing_id, Snapshot.first_seen, Snapshot.last_seen)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version)
    ).all()
    if not spans:
        return []
    server_listings = select(Snapshot.listing_id).where(Snapshot.server_id == server_id)
    holding = dict(
        session.execute(
            select(ListingTool.listing_id, ToolDefinition.id)
            .join(ToolDefinition, ToolDefinition.id == ListingTool.tool_id)
            .where(ToolDefinition.name == tool, ListingTool.listing_id.in_(server_listings))
        ).all()
    )
    if not holding:
        return []
    definitions = dict(
        session.execute(
            select(ToolDefinition.id, ToolDefinition.fingerprint).where(
                ToolDefinition.id.in_(set(holding.values()))
            )
        ).all()
    )
    bodies = _definitions(session, holding.values())
    runs: list[ToolVersion] = []
    run_start_ids: dict[int, ToolVersion] = {}
    current_tool_id: int | Literal["unset"] | None = "unset"
    for snapshot_id, version, listing_id, first_seen, last_seen in spans:
        tool_id = holding.get(listing_id)
        if current_tool_id == "unset" and tool_id is None:
            continue  # before the tool first appeared
        if runs and tool_id == current_tool_id:
            runs[-1].to_version = version
            runs[-1].last_seen = last_seen
            continue
        current_tool_id = tool_id
        run = ToolVersion(
            from_version=version,
            to_version=version,
            first_seen=first_seen,
            last_seen=last_seen,
            fingerprint=definitions.get(tool_id) if tool_id is not None else None,
            definition=bodies.get(tool_id) if tool_id is not None else None,
        )
        runs.append(run)
        run_start_ids[snapshot_id] = run
    for change in _tool_findings(session, server_id, tool):
        snapshot_id = change[1]
        if snapshot_id in run_start_ids:
            run_start_ids[snapshot_id].findings.append(change[0])
    return runs


def _tool_findings(session: Session, server_id: int, tool: str) -> list[tuple[ChangeRow, int]]:
    """Findings about one tool, with the snapshot each was detected at (oldest first)."""
    query = (
        _change_query()
        .add_columns(FindingRecord.to_snapshot_id)
        .where(FindingRecord.server_id == server_id, FindingRecord.tool == tool)
        .where(FindingRecord.to_snapshot_id.is_not(None))
        .order_by(FindingRecord.severity_rank.desc(), FindingRecord.id)
    )
    return [(_change_row(row), row[-1]) for row in session.execute(query)]


# --- changes and alerts ----------------------------------------------------------------------

_FROM = aliased(Snapshot)
_TO = aliased(Snapshot)


def _change_query() -> Any:
    return (
        select(
            FindingRecord.id,
            Server.name,
            FindingRecord.detected_at,
            FindingRecord.rule,
            FindingRecord.severity,
            FindingRecord.tool,
            FindingRecord.field,
            FindingRecord.old,
            FindingRecord.new,
            FindingRecord.message,
            FindingRecord.detail,
            _FROM.version,
            _TO.version,
        )
        .join(Server, Server.id == FindingRecord.server_id)
        .outerjoin(_FROM, _FROM.id == FindingRecord.from_snapshot_id)
        .outerjoin(_TO, _TO.id == FindingRecord.to_snapshot_id)
    )


def _change_row(row: Sequence[Any]) -> ChangeRow:
    return ChangeRow(*row[:13])


def changes(
    session: Session,
    *,
    server_id: int | None = None,
    min_severity: Severity | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int,
    before: int | None = None,
) -> list[ChangeRow]:
    """Findings newest first, worst first within one poll; `before` is the previous page's last id."""
    query = _change_query()
    if server_id is not None:
        query = query.where(FindingRecord.server_id == server_id)
    if min_severity is not None:
        query = query.where(FindingRecord.severity_rank >= min_severity.rank)
    if since is not None:
        query = query.where(FindingRecord.detected_at >= since)
    if until is not None:
        query = query.where(FindingRecord.detected_at < until)
    if before is not None:
        cursor = session.execute(
            select(FindingRecord.detected_at, FindingRecord.severity_rank).where(FindingRecord.id == before)
        ).first()
        if cursor is None:
            query = query.where(FindingRecord.id < before)
        else:
            at, rank = cursor
            query = query.where(
                or_(
                    FindingRecord.detected_at < at,
                    and_(FindingRecord.detected_at == at, FindingRecord.severity_rank < rank),
                    and_(
                        FindingRecord.detected_at == at,
                        FindingRecord.severity_rank == rank,
                        FindingRecord.id < before,
                    ),
                )
            )
    query = query.order_by(
        FindingRecord.detected_at.desc(), FindingRecord.severity_rank.desc(), FindingRecord.id.desc()
    ).limit(limit)
    return [_change_row(row) for row in session.execute(query)]


def alerts(
    session: Session,
    *,
    state: AlertState | None = None,
    server_id: int | None = None,
    min_severity: Severity | None = None,
    limit: int,
    before: int | None = None,
    alert_id: int | None = None,
) -> list[AlertRow]:
    """Alerts newest first by id; `before` is the id of the previous page's last alert."""
    finding_count = (
        select(func.count())
        .select_from(AlertFinding)
        .where(AlertFinding.alert_id == Alert.id)
        .scalar_subquery()
    )
    query = select(
        Alert.id,
        Server.name,
        Alert.rule,
        Alert.severity,
        Alert.tool,
        Alert.session_id,
        Alert.state,
        Alert.message,
        Alert.opened_at,
        Alert.last_seen_at,
        Alert.acknowledged_at,
        Alert.resolved_at,
        finding_count,
    ).join(Server, Server.id == Alert.server_id)
    if state is not None:
        query = query.where(Alert.state == state)
    if server_id is not None:
        query = query.where(Alert.server_id == server_id)
    if min_severity is not None:
        query = query.where(Alert.severity_rank >= min_severity.rank)
    if before is not None:
        query = query.where(Alert.id < before)
    if alert_id is not None:
        query = query.where(Alert.id == alert_id)
    query = query.order_by(Alert.id.desc()).limit(limit)
    return [AlertRow(*tuple(row)) for row in session.execute(query)]


def alert(session: Session, alert_id: int) -> AlertRow | None:
    rows = alerts(session, limit=1, alert_id=alert_id)
    return rows[0] if rows else None


def version_summaries(session: Session, snapshot_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """For each snapshot: how many findings led to it and the worst one's rank."""
    if not snapshot_ids:
        return {}
    rows = session.execute(
        select(FindingRecord.to_snapshot_id, func.count(), func.max(FindingRecord.severity_rank))
        .where(FindingRecord.to_snapshot_id.in_(list(snapshot_ids)))
        .group_by(FindingRecord.to_snapshot_id)
    ).all()
    return {int(sid): (int(count), int(worst)) for sid, count, worst in rows if sid is not None}


@dataclass(frozen=True)
class AttemptRow:
    started_at: datetime
    duration_ms: float
    ok: bool
    error_kind: str | None
    error: str | None


def recent_attempts(session: Session, server_id: int, limit: int = 10) -> list[AttemptRow]:
    rows = session.execute(
        select(
            PollAttempt.started_at,
            PollAttempt.duration_ms,
            PollAttempt.ok,
            PollAttempt.error_kind,
            PollAttempt.error,
        )
        .where(PollAttempt.server_id == server_id)
        .order_by(PollAttempt.id.desc())
        .limit(limit)
    ).all()
    return [AttemptRow(*row) for row in rows]


def alert_state_counts(session: Session) -> dict[str, int]:
    rows = session.execute(select(Alert.state, func.count()).group_by(Alert.state)).all()
    counts = {"open": 0, "acknowledged": 0, "resolved": 0}
    counts.update({state: int(n) for state, n in rows})
    return counts


# --- metrics ---------------------------------------------------------------------------------


def metrics(session: Session, *, now: datetime, window: timedelta) -> MetricsData:
    """Counts for /metrics, read at scrape time so every monitor process reports the same totals.

    Successful polls are the sum of the versions' poll counts (success rows are trimmed, spans are
    not); failed polls are kept one row each.
    """
    polls_ok = session.scalar(select(func.coalesce(func.sum(Snapshot.poll_count), 0))) or 0
    polls_failed = session.scalar(
        select(func.count()).select_from(PollAttempt).where(PollAttempt.ok.is_(False))
    )
    never = Server.last_poll_at.is_(None)
    failing = and_(Server.last_poll_at.is_not(None), Server.consecutive_failures > 0)
    total, never_polled, failing_count = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(case((never, 1), else_=0)), 0),
            func.coalesce(func.sum(case((failing, 1), else_=0)), 0),
        ).select_from(Server)
    ).one()
    statuses = {
        "ok": int(total) - int(never_polled) - int(failing_count),
        "failing": int(failing_count),
        "never polled": int(never_polled),
    }
    alerts: dict[tuple[str, str], int] = {
        (state, severity): 0 for state in ("open", "acknowledged") for severity in SEVERITIES
    }
    for state, severity, count in session.execute(
        select(Alert.state, Alert.severity, func.count())
        .where(Alert.state.in_(["open", "acknowledged"]))
        .group_by(Alert.state, Alert.severity)
    ):
        alerts[(state, severity)] = int(count)
    pending, oldest = session.execute(
        select(func.count(), func.min(WebhookDelivery.created_at)).where(WebhookDelivery.state == "pending")
    ).one()
    durations = list(
        session.scalars(select(PollAttempt.duration_ms).where(PollAttempt.started_at >= now - window))
    )
    versions = session.scalar(select(func.count()).select_from(Snapshot)) or 0
    return MetricsData(
        polls_ok=int(polls_ok),
        polls_failed=int(polls_failed or 0),
        servers_by_status=statuses,
        alerts=alerts,
        pending_deliveries=int(pending),
        oldest_pending_delivery=oldest,
        recent_durations_ms=[float(d) for d in durations],
        snapshot_versions=int(versions),
    )
