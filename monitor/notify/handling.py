"""What a person does to an alert: acknowledge it (by whom, why) or resolve it by hand.

Both go through the alert lifecycle in `monitor.notify.alerts`, so the sinks that heard an alert open
hear what became of it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.states import AlertEvent, AlertState, ResolveCause
from monitor.core.times import utc_text
from monitor.notify.alerts import Alerting
from monitor.notify.events import alert_event
from monitor.notify.lifecycle import resolve
from monitor.notify.routing import announce
from monitor.store.models import Alert, Server
from monitor.store.records import SilenceRecord


class AlertResolved(ValueError):
    """A change a resolved alert no longer takes (the API's and the page's 409)."""


def acknowledge(
    session: Session,
    alert_id: int,
    now: datetime,
    *,
    by: str,
    note: str | None = None,
    policy: Alerting | None = None,
) -> Alert | None:
    """Mark an alert as seen, by whom and why; it stays unresolved until its condition clears.

    None: no such alert. Acknowledging again keeps the first time and who, and takes a later note;
    a resolved alert raises `AlertResolved`, since nothing is left to acknowledge. With the
    `policy`, the sinks that track acknowledgement (PagerDuty) hear of it.
    """
    alert = session.get(Alert, alert_id, with_for_update=True)
    if alert is None:
        return None
    if alert.state == AlertState.RESOLVED:
        raise AlertResolved(
            f"alert {alert_id} was resolved at {_when(alert.resolved_at)}: nothing to acknowledge"
        )
    alert.acknowledged_by = alert.acknowledged_by if alert.state == AlertState.ACKNOWLEDGED else by
    alert.ack_note = note or alert.ack_note
    if alert.state == AlertState.OPEN:
        alert.state, alert.acknowledged_at = AlertState.ACKNOWLEDGED, now
        server = session.get_one(Server, alert.server_id)
        alert_event(session, alert, server.name, "acknowledged", by=by)
        if policy is not None:
            targets = policy.webhooks_for(alert.severity_rank)
            announce(session, alert, server.name, AlertEvent.ACKNOWLEDGED, targets, now, policy)
    return alert


def resolve_by_hand(
    session: Session, alert_id: int, now: datetime, *, by: str, note: str | None, policy: Alerting
) -> Alert | None:
    """A person closes an alert (a session that will never report again, a known change): webhooks hear it.

    None: no such alert; an alert already resolved raises `AlertResolved`. If the condition is
    still there, the next finding opens a new alert: resolving is not muting (silences are).
    """
    alert = session.get(Alert, alert_id, with_for_update=True)
    if alert is None:
        return None
    if alert.state == AlertState.RESOLVED:
        raise AlertResolved(f"alert {alert_id} was already resolved at {_when(alert.resolved_at)}")
    alert.resolved_by, alert.resolve_note, alert.resolve_cause = by, note, ResolveCause.BY_HAND
    resolve(session, alert, now, policy=policy)
    return alert


def resolve_silenced(
    session: Session, silence: SilenceRecord, now: datetime, *, by: str, policy: Alerting
) -> list[int]:
    """ "Silence this": the unresolved alerts the new silence matches resolve, their cause the silence
    ("silenced by NAME until T: why"); what they were about stays muted until it ends. The ids."""
    query = select(Alert).join(Server, Server.id == Alert.server_id)
    query = query.where(Alert.state.in_(AlertState.unresolved()))
    if silence.server is not None:
        query = query.where(Server.name == silence.server)
    if silence.tool is not None:
        query = query.where(Alert.tool == silence.tool)
    if silence.rule is not None:
        query = query.where(Alert.rule == silence.rule)
    resolved = []
    for alert in session.scalars(query.order_by(Alert.id).with_for_update(of=Alert)):
        alert.resolved_by, alert.resolve_cause = by, ResolveCause.SILENCED
        alert.resolve_note = f"silenced until {utc_text(silence.ends_at)}: {silence.reason}"
        resolve(session, alert, now, policy=policy)
        resolved.append(alert.id)
    return resolved


def _when(at: datetime | None) -> str:
    return utc_text(at) if at is not None else "an unknown time"
