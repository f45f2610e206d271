"""Routing: which webhooks hear of an alert, and queueing what they hear in the outbox.

A webhook hears of alerts at or above its own `min_severity`, of the events its sink hears
(`monitor.sinks.hears`); what it will receive is rendered and queued in the caller's transaction,
so an outbox row commits with the alert event that caused it, or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Required, TypedDict, Unpack

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.findings import Severity
from monitor.core.states import AlertEvent
from monitor.notify.outbox import DEFAULT_EXPIRY, enqueue, wake_after_commit
from monitor.notify.payloads import MAX_FINDINGS, alert_payload
from monitor.sinks import hears
from monitor.sinks.base import WebhookConfig
from monitor.store.installation import alert_keys
from monitor.store.models import Alert, AlertFinding, FindingRecord


class RoutingOptions(TypedDict, total=False):
    """How `Routing` is made, besides its webhooks."""

    base_url: Required[str]
    """The dashboard's address, for the alert links webhooks carry."""
    min_severity: Severity | None
    delivery_expiry: timedelta


class Routing:
    """Where alerts go: the webhooks, the lowest severity that opens an alert, the links' base."""

    def __init__(self, webhooks: Sequence[WebhookConfig] = (), **options: Unpack[RoutingOptions]) -> None:
        self.webhooks = list(webhooks)
        self.base_url = options["base_url"].rstrip("/")
        self.min_severity = options.get("min_severity") or min(
            (webhook.min_severity for webhook in self.webhooks), key=lambda s: s.rank, default=Severity.HIGH
        )
        """Findings at or above this open alerts; by default the lowest any webhook wants."""
        self.delivery_expiry = options.get("delivery_expiry", DEFAULT_EXPIRY)
        self.on_enqueue: Callable[[], None] | None = None
        """Called after a transaction that enqueued deliveries commits (e.g. `Deliverer.notify`)."""

    def webhooks_for(self, rank: int) -> list[WebhookConfig]:
        return [webhook for webhook in self.webhooks if rank >= webhook.min_severity.rank]


def announce(
    session: Session,
    alert: Alert,
    server: str,
    event_type: AlertEvent,
    targets: Iterable[WebhookConfig],
    now: datetime,
    policy: Routing,
) -> None:
    """Queue the event for those of `targets` whose sinks hear it, in the caller's transaction."""
    targets = [webhook for webhook in targets if hears(webhook, event_type)]
    if not targets:
        return
    session.flush()
    findings = session.scalars(
        select(FindingRecord)
        .join(AlertFinding, AlertFinding.finding_id == FindingRecord.id)
        .where(AlertFinding.alert_id == alert.id)
        .order_by(FindingRecord.id)
        .limit(MAX_FINDINGS)
    ).all()
    payload = alert_payload(event_type, alert, server, findings, policy.base_url, alert_keys(session))
    for webhook in targets:
        enqueue(session, webhook, payload, alert_id=alert.id, now=now, expires_after=policy.delivery_expiry)
    if policy.on_enqueue is not None:
        wake_after_commit(session, policy.on_enqueue)
