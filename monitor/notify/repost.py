"""Open alerts re-posted to each sink that forgets them otherwise (Alertmanager), as Prometheus does.

Alertmanager forgets an alert it has not heard of for `resolve_timeout` (5 minutes by default) and
keeps nothing across a restart without persistence. So every minute (`[monitor]
alert_repost_interval`) `serve` queues one delivery per
Alertmanager sink carrying every unresolved alert that sink wants. It goes through the outbox like
any delivery; while one is still pending (a dead Alertmanager), no other is queued, so an outage
does not pile up re-posts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.states import AlertEvent, AlertState, DeliveryState
from monitor.notify.alerts import Alerting
from monitor.notify.outbox import enqueue, wake_after_commit
from monitor.notify.payloads import alert_payload
from monitor.sinks import reposts_open_alerts
from monitor.store.installation import alert_keys
from monitor.store.models import Alert, Server, WebhookDelivery

REPOST_EXPIRY = timedelta(minutes=1)
"""A re-post not delivered by then is dropped: the next one carries the same alerts, fresher."""
MAX_ALERTS = 1000
"""Alerts in one re-post, worst first; the oldest of more than that are re-posted no longer."""


def repost_open_alerts(session: Session, policy: Alerting, now: datetime) -> int:
    """Queue a re-post of the open alerts to every Alertmanager sink; returns how many were queued."""
    queued = 0
    for webhook in policy.webhooks:
        if not reposts_open_alerts(webhook):
            continue
        pending = session.scalar(
            select(WebhookDelivery.id)
            .where(
                WebhookDelivery.webhook == webhook.name,
                WebhookDelivery.event_type == AlertEvent.FIRING,
                WebhookDelivery.state == DeliveryState.PENDING,
            )
            .limit(1)
        )
        if pending is not None:
            continue
        rows = session.execute(
            select(Alert, Server.name)
            .join(Server, Server.id == Alert.server_id)
            .where(
                Alert.state.in_(AlertState.unresolved()),
                Alert.severity_rank >= webhook.min_severity.rank,
            )
            .order_by(Alert.severity_rank.desc(), Alert.id.desc())
            .limit(MAX_ALERTS)
        ).all()
        if not rows:
            continue
        keys = alert_keys(session)
        events = [
            alert_payload(AlertEvent.OPENED, alert, server, [], policy.base_url, keys)
            for alert, server in rows
        ]
        payload = {"type": AlertEvent.FIRING.value, "alerts": events}
        enqueue(session, webhook, payload, alert_id=None, now=now, expires_after=REPOST_EXPIRY)
        queued += 1
    if queued and policy.on_enqueue is not None:
        wake_after_commit(session, policy.on_enqueue)
    return queued
