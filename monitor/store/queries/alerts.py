"""Alerts as the web layer lists them, and the counts the overview and navigation show."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from monitor.core.rules import Severity
from monitor.core.states import AlertState
from monitor.store.models import Alert, AlertFinding, FindingRecord, Server, WebhookDelivery
from monitor.store.queries.changes import change_query
from monitor.store.records import AlertDetail, AlertRecord, ChangeRecord, DeliveryRecord

FINDINGS_SHOWN = 200
"""Findings listed on one alert's page: the first ones (what opened it) and then the newest."""


def list_alerts(
    session: Session,
    *,
    state: AlertState | None = None,
    server_id: int | None = None,
    min_severity: Severity | None = None,
    limit: int,
    before: int | None = None,
    alert_id: int | None = None,
    states: Sequence[AlertState] | None = None,
    severity: Severity | None = None,
    rule: str | None = None,
    worst_first: bool = False,
    before_rank: int | None = None,
) -> list[AlertRecord]:
    """Alerts newest first by id; `before` is the id of the previous page's last alert.

    `worst_first` orders by severity, then newest: the page a person triages from. Its next page
    starts after the last row's (`before_rank`, `before`)."""
    finding_count = (
        select(func.count())
        .select_from(AlertFinding)
        .where(AlertFinding.alert_id == Alert.id)
        .scalar_subquery()
    )
    query = select(
        Alert.id,
        Server.name.label("server"),
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
        finding_count.label("finding_count"),
        Alert.acknowledged_by,
        Alert.ack_note,
        Alert.resolved_by,
        Alert.resolve_note,
        Alert.resolve_cause,
    ).join(Server, Server.id == Alert.server_id)
    if state is not None:
        query = query.where(Alert.state == state)
    if server_id is not None:
        query = query.where(Alert.server_id == server_id)
    if min_severity is not None:
        query = query.where(Alert.severity_rank >= min_severity.rank)
    if states is not None:
        query = query.where(Alert.state.in_([s.value for s in states]))
    if severity is not None:
        query = query.where(Alert.severity_rank == severity.rank)
    if rule is not None:
        query = query.where(Alert.rule == rule)
    if before is not None and worst_first and before_rank is not None:
        query = query.where(
            or_(
                Alert.severity_rank < before_rank,
                and_(Alert.severity_rank == before_rank, Alert.id < before),
            )
        )
    elif before is not None:
        query = query.where(Alert.id < before)
    if alert_id is not None:
        query = query.where(Alert.id == alert_id)
    if worst_first:
        query = query.order_by(Alert.severity_rank.desc(), Alert.id.desc()).limit(limit)
    else:
        query = query.order_by(Alert.id.desc()).limit(limit)
    return [AlertRecord.model_validate(row) for row in session.execute(query)]


def unresolved_alerts(session: Session, server_ids: Sequence[int]) -> list[AlertRecord]:
    """The open and acknowledged alerts of these servers, worst first, then newest."""
    rows = [
        alert
        for server_id in server_ids
        for state in AlertState.unresolved()
        for alert in list_alerts(session, state=state, server_id=server_id, limit=100)
    ]
    return sorted(rows, key=lambda alert: (-alert.severity.rank, -alert.id))


def find_alert(session: Session, alert_id: int) -> AlertRecord | None:
    rows = list_alerts(session, limit=1, alert_id=alert_id)
    return rows[0] if rows else None


def alert_detail(session: Session, alert_id: int) -> AlertDetail | None:
    """The alert, the findings it gathered (the first half of the cap oldest first, the rest newest) and
    every delivery of it, oldest first."""
    alert = find_alert(session, alert_id)
    if alert is None:
        return None
    attached = change_query().join(AlertFinding, AlertFinding.finding_id == FindingRecord.id)
    attached = attached.where(AlertFinding.alert_id == alert_id)
    half = FINDINGS_SHOWN // 2
    first = session.execute(attached.order_by(FindingRecord.id).limit(half)).all()
    last = session.execute(attached.order_by(FindingRecord.id.desc()).limit(half)).all()
    rows = {row.id: row for row in [*first, *last]}
    findings = [ChangeRecord.model_validate(rows[key]) for key in sorted(rows)]
    deliveries = session.scalars(
        select(WebhookDelivery)
        .where(WebhookDelivery.alert_id == alert_id)
        .order_by(WebhookDelivery.created_at, WebhookDelivery.webhook)
    ).all()
    return AlertDetail(
        alert=alert,
        findings=findings,
        deliveries=[DeliveryRecord.model_validate(delivery) for delivery in deliveries],
    )


def alert_state_counts(session: Session) -> dict[AlertState, int]:
    counts = dict.fromkeys(AlertState, 0)
    for state, count in session.execute(select(Alert.state, func.count()).group_by(Alert.state)):
        counts[AlertState(state)] = int(count)
    return counts


def open_alert_counts(
    session: Session, server_ids: Iterable[int] | None = None, *, state: AlertState = AlertState.OPEN
) -> dict[int, dict[str, int]]:
    """Open (not acknowledged, not resolved) alerts per server and severity; or those in `state`."""
    query = select(Alert.server_id, Alert.severity, func.count()).where(Alert.state == state)
    if server_ids is not None:
        query = query.where(Alert.server_id.in_(list(server_ids)))
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for sid, severity, count in session.execute(query.group_by(Alert.server_id, Alert.severity)):
        counts[sid][severity] = int(count)
    return counts
