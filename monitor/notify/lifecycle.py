"""An alert's life: opened once per (server, rule, tool or session) key, attached to by repeats,
raised or lowered in place, resolved once.

While an alert is not resolved its `open_key` holds the (server, rule, tool, session) key under a
unique index, so a repeat finding attaches to it instead of opening another: one webhook when the
condition starts, one when it clears, no storm. Everything here runs inside the caller's
transaction, so an alert and its outbox rows commit together with the findings that caused them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.findings import Severity
from monitor.core.states import AlertEvent, AlertState, ResolveCause
from monitor.notify.events import alert_event
from monitor.notify.outbox import opened_for
from monitor.notify.routing import Routing, announce
from monitor.store.db import insert
from monitor.store.models import Alert, AlertFinding, FindingRecord, Server
from monitor.store.records import resolution


def open_or_attach(
    session: Session,
    server: Server,
    *,
    rule: str,
    severity: Severity,
    tool: str | None = None,
    session_id: str | None = None,
    message: str,
    findings: Sequence[FindingRecord] = (),
    now: datetime,
    policy: Routing,
) -> Alert:
    """The open alert for this key with `findings` attached, opening (and announcing) it if needed.

    The caller decides whether `severity` deserves an alert (see `Alerting.min_severity`); webhooks
    still hear only of alerts at or above their own `min_severity`.
    """
    key = open_key(server.id, rule, tool, session_id)
    for _ in range(3):
        alert = open_alert(session, key)
        if alert is not None:
            attach(session, alert, server, severity, message, findings, now, policy)
            return alert
        # ON CONFLICT: a concurrent transaction that opened this key first wins, and we attach.
        alert_id = session.scalar(
            insert(session)(Alert)
            .values(
                server_id=server.id,
                rule=rule,
                severity=severity.value,
                severity_rank=severity.rank,
                tool=tool,
                session_id=session_id,
                state=AlertState.OPEN,
                open_key=key,
                message=message,
                opened_at=now,
                last_seen_at=now,
            )
            .on_conflict_do_nothing(index_elements=["open_key"])
            .returning(Alert.id)
        )
        if alert_id is not None:
            alert = session.get_one(Alert, alert_id)
            if rule == "listing-flapping":  # what lets a poll of the server skip looking for one
                server.flapping_alert_possible = True
            session.add_all(AlertFinding(alert_id=alert.id, finding_id=f.id) for f in findings)
            alert_event(session, alert, server.name, "opened")
            announce(
                session,
                alert,
                server.name,
                AlertEvent.OPENED,
                policy.webhooks_for(severity.rank),
                now,
                policy,
            )
            return alert
    raise RuntimeError(f"alert {key} kept opening and resolving under us")


def resolve(session: Session, alert: Alert, now: datetime, *, policy: Routing) -> None:
    """Resolve the alert and tell the webhooks that heard it open; resolving twice does nothing."""
    if alert.state == AlertState.RESOLVED:
        return
    alert.state, alert.resolved_at, alert.open_key = AlertState.RESOLVED, now, None
    if alert.resolved_by is None or alert.resolve_cause is None:  # no person and cause given: cleared
        alert.resolved_by, alert.resolve_cause = None, ResolveCause.CLEARED
    server = session.get_one(Server, alert.server_id)
    cause = resolution(alert.state, alert.resolve_cause, alert.resolved_by, alert.resolve_note)
    alert_event(session, alert, server.name, "resolved", by=alert.resolved_by, cause=cause)
    announce(
        session,
        alert,
        server.name,
        AlertEvent.RESOLVED,
        policy.webhooks_for(alert.severity_rank),
        now,
        policy,
    )


def resolve_matching(
    session: Session,
    server_id: int,
    rule: str,
    tool: str | None = None,
    session_id: str | None = None,
    *,
    now: datetime,
    policy: Routing,
) -> Alert | None:
    """Resolve the open alert with exactly this key, if there is one, and return it."""
    alert = open_alert(session, open_key(server_id, rule, tool, session_id))
    if alert is not None:
        resolve(session, alert, now, policy=policy)
    return alert


def open_key(server_id: int, rule: str, tool: str | None, session_id: str | None) -> str:
    """Unambiguous whatever a tool is named, and of fixed length, so the unique index never overflows."""
    digest = hashlib.sha256(json.dumps([tool, session_id]).encode("ascii")).hexdigest()
    return f"{server_id}/{rule}/{digest}"


def open_keys(session: Session, rule: str) -> set[str]:
    """The keys of every open alert of `rule`: a checker that goes over every session looks each one's
    alert up only when it has one (one statement, instead of one per session)."""
    return set(session.scalars(select(Alert.open_key).where(Alert.rule == rule, Alert.open_key.is_not(None))))


def open_alert(session: Session, key: str) -> Alert | None:
    return session.scalar(select(Alert).where(Alert.open_key == key).with_for_update())


def attach(
    session: Session,
    alert: Alert,
    server: Server,
    severity: Severity,
    message: str,
    findings: Sequence[FindingRecord],
    now: datetime,
    policy: Routing,
    *,
    lower: bool = False,
) -> None:
    """A repeat: no new webhook, except to webhooks a worse severity now concerns that have not heard
    the alert open yet. With `lower`, a better severity lowers the alert in place, with no webhook."""
    session.add_all(AlertFinding(alert_id=alert.id, finding_id=f.id) for f in findings)
    alert.last_seen_at = max(alert.last_seen_at, now)
    alert.clear_since = None
    if severity.rank > alert.severity_rank or (lower and severity.rank < alert.severity_rank):
        raised = severity.rank > alert.severity_rank
        alert.severity, alert.severity_rank, alert.message = severity.value, severity.rank, message
        alert_event(session, alert, server.name, "raised" if raised else "lowered")
        if raised:
            heard = opened_for(session, alert.id)
            newly = [w for w in policy.webhooks_for(severity.rank) if w.name not in heard]
            announce(session, alert, server.name, AlertEvent.OPENED, newly, now, policy)
