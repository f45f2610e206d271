"""The alert event's body (docs/contract.md section 9), built from the alert's and its findings' records.

Every sink renders what it sends from this body (`monitor.sinks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from monitor.core.states import AlertEvent
from monitor.store.installation import AlertKeys
from monitor.store.models import Alert, FindingRecord
from monitor.store.records import AlertRecord, FindingFields

MAX_FINDINGS = 100
"""Findings carried in one payload; a long-lived alert can gather many, the dashboard has them all."""


def alert_payload(
    event_type: AlertEvent,
    alert: Alert,
    server: str,
    findings: Sequence[FindingRecord],
    base_url: str,
    keys: AlertKeys,
) -> dict[str, Any]:
    """The body of docs/contract.md section 9, from the alert's and its findings' records; `key` (the
    alert's id scoped by the installation), `state`, `session_id` and `resolved_at` are extras for
    receivers that route or deduplicate. `by` and `note` say who acknowledged or resolved it and why
    (null for what the monitor did itself: opening, or resolving when the condition cleared), and
    `cause` says in words why an `alert.resolved` ended it (docs/contract.md section 13)."""
    record = AlertRecord.of(alert, server=server, finding_count=len(findings))
    by, note = _actor(event_type, record)
    return {
        "type": event_type.value,
        "by": by,
        "note": note,
        "cause": record.resolution if event_type == AlertEvent.RESOLVED else None,
        "alert": {
            "id": record.id,
            "key": keys.key(record.id),
            "rule": record.rule,
            "severity": record.severity.value,
            "state": record.state.value,
            "server": record.server,
            "tool": record.tool,
            "session_id": record.session_id,
            "message": record.message,
            "opened_at": _iso(record.opened_at),
            "resolved_at": _iso(record.resolved_at) if record.resolved_at else None,
            "url": f"{base_url.rstrip('/')}/alerts/{record.id}",
        },
        "findings": [_finding_payload(finding) for finding in findings[:MAX_FINDINGS]],
    }


def _actor(event_type: AlertEvent, record: AlertRecord) -> tuple[str | None, str | None]:
    if event_type == AlertEvent.ACKNOWLEDGED:
        return record.acknowledged_by, record.ack_note
    if event_type == AlertEvent.RESOLVED:
        return record.resolved_by, record.resolve_note
    return None, None


def _finding_payload(stored: FindingRecord) -> dict[str, Any]:
    finding = FindingFields.model_validate(stored)
    return {
        "rule": finding.rule,
        "severity": finding.severity.value,
        "tool": finding.tool,
        "field": finding.field,
        "old": finding.old,
        "new": finding.new,
        "message": finding.message,
        "detected_at": _iso(stored.detected_at),
    }


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
