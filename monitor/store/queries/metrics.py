"""The gauges /metrics reads from the database at scrape time, so every monitor process reports the
same state. Events (polls, alerts, deliveries) are counted in-process instead (`monitor.metrics`):
these tables are pruned, and a counter must never go down."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitor.core.states import AlertState, DeliveryState, ServerStatus
from monitor.store.models import Alert, Server, Snapshot, WebhookDelivery
from monitor.store.records import SEVERITIES, is_overdue

MAX_SERVER_SERIES = 2000
"""Per-server gauges cover at most this many servers (by name), so one scrape stays bounded."""


@dataclass(frozen=True)
class ServerMetrics:
    name: str
    up: bool | None
    """Whether the last poll succeeded; None before the first poll."""
    version: int
    """The current listing version, 0 before the first successful poll."""
    last_poll_at: datetime | None
    last_success_at: datetime | None
    open_alerts: dict[str, int]
    """Unresolved alerts by severity, every severity present."""
    interval_seconds: float
    """How often it is meant to be polled: its own interval, else the configured one."""


@dataclass(frozen=True)
class MetricsData:
    servers_by_status: dict[ServerStatus, int]
    alerts: dict[tuple[AlertState, str], int]
    """(state, severity) -> count, for open and acknowledged alerts."""
    pending_deliveries: int
    oldest_pending_delivery: datetime | None
    snapshot_versions: int
    servers: list[ServerMetrics]


def read_metrics(session: Session, now: datetime, default_interval: float) -> MetricsData:
    """The state /metrics reports as gauges, read in one session; `overdue` as of `now`, each
    server's own interval or else `default_interval`."""
    statuses = dict.fromkeys(ServerStatus, 0)
    for last_poll, failures, interval in session.execute(
        select(Server.last_poll_at, Server.consecutive_failures, Server.interval_seconds)
    ):
        if last_poll is None:
            statuses[ServerStatus.NEVER_POLLED] += 1
        elif failures > 0:
            statuses[ServerStatus.FAILING] += 1
        elif is_overdue(last_poll, interval or default_interval, now):
            statuses[ServerStatus.OVERDUE] += 1
        else:
            statuses[ServerStatus.OK] += 1
    unresolved = AlertState.unresolved()
    alerts = {(state, severity): 0 for state in unresolved for severity in SEVERITIES}
    for state, severity, count in session.execute(
        select(Alert.state, Alert.severity, func.count())
        .where(Alert.state.in_(unresolved))
        .group_by(Alert.state, Alert.severity)
    ):
        alerts[(AlertState(state), severity)] = int(count)
    pending, oldest = session.execute(
        select(func.count(), func.min(WebhookDelivery.created_at)).where(
            WebhookDelivery.state == DeliveryState.PENDING
        )
    ).one()
    versions = session.scalar(select(func.count()).select_from(Snapshot)) or 0
    return MetricsData(
        servers_by_status=statuses,
        alerts=alerts,
        pending_deliveries=int(pending),
        oldest_pending_delivery=oldest,
        snapshot_versions=int(versions),
        servers=_servers(session, default_interval),
    )


def _servers(session: Session, default_interval: float) -> list[ServerMetrics]:
    """One row per registered server (the first `MAX_SERVER_SERIES` by name): its up-ness, version, alerts."""
    versions = (
        select(Snapshot.server_id, func.max(Snapshot.version).label("version"))
        .group_by(Snapshot.server_id)
        .subquery()
    )
    rows = session.execute(
        select(
            Server.id,
            Server.name,
            Server.last_poll_at,
            Server.last_success_at,
            Server.consecutive_failures,
            versions.c.version,
            Server.interval_seconds,
        )
        .outerjoin(versions, versions.c.server_id == Server.id)
        .order_by(Server.name)
        .limit(MAX_SERVER_SERIES)
    ).all()
    alerts: dict[int, dict[str, int]] = {}
    for server_id, severity, count in session.execute(
        select(Alert.server_id, Alert.severity, func.count())
        .where(Alert.state.in_(AlertState.unresolved()))
        .group_by(Alert.server_id, Alert.severity)
    ):
        alerts.setdefault(server_id, {})[severity] = int(count)
    return [
        ServerMetrics(
            name=name,
            up=None if last_poll is None else failures == 0,
            version=int(version or 0),
            last_poll_at=last_poll,
            last_success_at=last_success,
            open_alerts={severity: alerts.get(server_id, {}).get(severity, 0) for severity in SEVERITIES},
            interval_seconds=interval or default_interval,
        )
        for server_id, name, last_poll, last_success, failures, version, interval in rows
    ]
