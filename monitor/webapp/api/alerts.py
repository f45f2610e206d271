"""/api/v1/alerts: alerts newest first, and acknowledging one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from monitor.core.rules import Severity
from monitor.core.states import AlertState
from monitor.notify import alerts
from monitor.store import queries
from monitor.store.records import AlertRecord
from monitor.webapp.api.schemas import (
    ERRORS,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    IntCursor,
    Limit,
    Page,
    RuleId,
    not_found,
)
from monitor.webapp.api.strict import contradiction
from monitor.webapp.deps import (
    ReadSession,
    Web,
    WriteSession,
    alert_or_404,
    require_read,
    require_write,
    server_id_or_404,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["alerts"],
    dependencies=[Depends(require_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)


@router.get("/alerts", summary="Alerts newest first", responses=not_found("server"))
def list_alerts(
    session: ReadSession,
    state: AlertState | None = None,
    server: Annotated[str | None, Query(max_length=200, pattern=SERVER_NAME)] = None,
    min_severity: Severity | None = None,
    severity: Annotated[Severity | None, Query(description="Exactly this severity")] = None,
    rule: RuleId = None,
    limit: Limit = 100,
    before: IntCursor = None,
) -> Page[AlertRecord, int]:
    if severity is not None and min_severity is not None:
        raise contradiction(("severity", "min_severity"), "give severity or min_severity, not both")
    rows = queries.list_alerts(
        session,
        state=state,
        server_id=server_id_or_404(session, server) if server is not None else None,
        min_severity=min_severity,
        severity=severity,
        rule=rule,
        limit=limit + 1,
        before=before,
    )
    return Page.of(rows, limit, lambda alert: alert.id)


@router.post(
    "/alerts/{alert_id}/ack",
    summary="Acknowledge an alert",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **not_found("alert")},
)
def ack_alert(
    web: Web, alert: Annotated[AlertRecord, Depends(alert_or_404)], session: WriteSession
) -> AlertRecord:
    """Through `monitor.notify.alerts`, which owns alert state; answers the alert as it now is."""
    alerts.acknowledge(session, alert.id, web.now(), policy=web.alerting)
    acknowledged = queries.find_alert(session, alert.id)
    assert acknowledged is not None  # alert_or_404 found it in this same transaction
    return acknowledged
