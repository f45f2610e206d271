"""The counts /metrics reports, read at scrape time so every monitor process reports the same totals."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, select
from sqlalchemy.orm import Session

from monitor.core.states import AlertState, DeliveryState, ServerStatus
from monitor.store.marks import epoch_ms
from monitor.store.models import Alert, PollAttempt, PollMark, Server, Snapshot, WebhookDelivery
from monitor.store.records import SEVERITIES


@dataclass(frozen=True)
class MetricsData:
    polls_ok: int
    polls_failed: int
    servers_by_status: dict[ServerStatus, int]
    alerts: dict[tuple[AlertState, str], int]
    """(state, severity) -> count, for open and acknowledged alerts."""
    pending_deliveries: int
    oldest_pending_delivery: datetime | None
    recent_durations_ms: list[float]
    snapshot_versions: int


def read_metrics(session: Session, *, now: datetime, window: timedelta) -> MetricsData:
    """Successful polls are the sum of the versions' poll counts (success rows are trimmed, spans are
    not); failed polls are kept one row each. Durations are those of the polls in the last `window`."""
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
        ServerStatus.OK: int(total) - int(never_polled) - int(failing_count),
        ServerStatus.FAILING: int(failing_count),
        ServerStatus.NEVER_POLLED: int(never_polled),
    }
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
    durations = [
        *session.scalars(select(PollAttempt.duration_ms).where(PollAttempt.started_at >= now - window)),
        *session.scalars(select(PollMark.duration_ms).where(PollMark.started_ms >= epoch_ms(now - window))),
    ]
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
