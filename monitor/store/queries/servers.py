"""Servers as the web layer shows them: each with its current version and open alerts, never its headers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.states import AlertState
from monitor.store.access import UnmonitoredServer
from monitor.store.marks import from_epoch_ms
from monitor.store.models import PollAttempt, PollMark, Server
from monitor.store.queries.alerts import open_alert_counts
from monitor.store.queries.history import current_snapshots
from monitor.store.records import SEVERITIES, ServerRecord, SnapshotRecord, UnmonitoredRecord

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
    Server.watch_connected_since.label("watching_since"),
    Server.last_notification_at,
    Server.era,
    Server.interval_seconds,
    Server.headers,
    Server.approval,
    Server.client,
    Server.ttl_ms,
    Server.cache_scope,
    Server.tools_list_changed_honored,
    Server.aliases,
    Server.unverifiable_reason,
)
"""Plain columns rather than ORM objects: the overview reads hundreds of servers per request."""


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


def _server_record(
    row: Any, current: SnapshotRecord | None, alerts: dict[str, int], acknowledged: dict[str, int]
) -> ServerRecord:
    """The record of one row of `_SERVER_COLUMNS`: the headers only say whether there are any."""
    return ServerRecord.model_validate(
        {
            **row._mapping,
            "url": redact_url(row.url),
            "consecutive_failures": row.consecutive_failures or 0,
            "has_headers": bool(row.headers),
            "current": current,
            "open_alerts": {s: alerts.get(s, 0) for s in SEVERITIES},
            "acknowledged_alerts": {s: acknowledged.get(s, 0) for s in SEVERITIES},
        }
    )


def list_servers(
    session: Session, *, limit: int | None = None, after: str | None = None
) -> list[ServerRecord]:
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
    acknowledged = open_alert_counts(session, ids, state=AlertState.ACKNOWLEDGED)
    return [
        _server_record(r, currents.get(r.id), alerts.get(r.id, {}), acknowledged.get(r.id, {})) for r in rows
    ]


def find_server(session: Session, name: str) -> ServerRecord | None:
    row = session.execute(select(*_SERVER_COLUMNS).where(Server.name == name)).first()
    if row is None:
        return None
    current = current_snapshots(session, [row.id]).get(row.id)
    acknowledged = open_alert_counts(session, [row.id], state=AlertState.ACKNOWLEDGED).get(row.id, {})
    return _server_record(row, current, open_alert_counts(session, [row.id]).get(row.id, {}), acknowledged)


def server_id(session: Session, name: str) -> int | None:
    return session.scalar(select(Server.id).where(Server.name == name))


def server_names(session: Session) -> list[str]:
    return list(session.scalars(select(Server.name).order_by(Server.name)))


@dataclass(frozen=True)
class AttemptRow:
    """One recent poll of a server, for its page."""

    started_at: datetime
    duration_ms: float
    ok: bool
    error_kind: str | None
    error: str | None
    id: int = 0
    has_raw: bool = False
    """A listing that could not be read was kept with it (see `raw_payload`)."""
    ttl_ms: int | None = None
    cache_scope: str | None = None
    refetches: int | None = None


def recent_attempts(session: Session, server_id: int, limit: int = 10) -> list[AttemptRow]:
    """The newest polls: full attempt rows (failures, new versions) and compact marks (unchanged)."""
    rows = session.execute(
        select(
            PollAttempt.started_at,
            PollAttempt.duration_ms,
            PollAttempt.ok,
            PollAttempt.error_kind,
            PollAttempt.error,
            PollAttempt.id,
            PollAttempt.raw_payload.is_not(None).label("has_raw"),
            PollAttempt.ttl_ms,
            PollAttempt.cache_scope,
            PollAttempt.refetches,
        )
        .where(PollAttempt.server_id == server_id)
        .order_by(PollAttempt.id.desc())
        .limit(limit)
    ).all()
    attempts = [AttemptRow(**row._asdict()) for row in rows]
    marks = session.execute(
        select(PollMark.started_ms, PollMark.duration_ms)
        .where(PollMark.server_id == server_id)
        .order_by(PollMark.started_ms.desc())
        .limit(limit)
    ).all()
    attempts += [AttemptRow(from_epoch_ms(at), float(ms), True, None, None) for at, ms in marks]
    return sorted(attempts, key=lambda a: a.started_at, reverse=True)[:limit]


def raw_payload(session: Session, server_id: int, attempt_id: int) -> str | None:
    """What a server sent in a poll that could not be read as a listing, if it was kept."""
    return session.scalar(
        select(PollAttempt.raw_payload).where(
            PollAttempt.id == attempt_id, PollAttempt.server_id == server_id
        )
    )


def unmonitored_servers(session: Session, limit: int = 50) -> list[UnmonitoredRecord]:
    """Names hosts asked about that no monitored server has, most recently asked about first."""
    rows = session.scalars(
        select(UnmonitoredServer).order_by(UnmonitoredServer.last_seen.desc()).limit(limit)
    ).all()
    return [UnmonitoredRecord.model_validate(row) for row in rows]
