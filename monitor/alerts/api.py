"""/api/v1/alerts: the alerts worst first (as the dashboard lists them), one with its findings and
deliveries; acknowledge, resolve."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from monitor.core.rules import Severity
from monitor.core.states import AlertStateFilter
from monitor.identity.callers import may_read, may_respond
from monitor.notify import handling, silences
from monitor.store import queries
from monitor.store.records import AlertDetail, AlertRecord
from monitor.web.acts import Acting
from monitor.web.deps import ReadSession, Web, WriteSession, alert_or_404, server_id_or_404
from monitor.web.schemas import (
    ERRORS,
    NO_NUL,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    ErrorOut,
    IntCursor,
    Limit,
    Page,
    RuleId,
    not_found,
)
from monitor.web.strict import contradiction

router = APIRouter(
    prefix="/api/v1",
    tags=["alerts"],
    responses=ERRORS,  # each route says who may use it (monitor.core.roles)
    default_response_class=ApiJSONResponse,
)


@router.get(
    "/alerts",
    summary="Alerts worst first, then newest",
    dependencies=[Depends(may_read)],
    responses=not_found("server"),
)
def list_alerts(
    web: Web,
    session: ReadSession,
    state: Annotated[
        AlertStateFilter,
        Query(
            description="`unresolved`: open and acknowledged (the dashboard's default); `all`: every state"
        ),
    ] = AlertStateFilter.ALL,
    server: Annotated[str | None, Query(max_length=200, pattern=SERVER_NAME)] = None,
    min_severity: Severity | None = None,
    severity: Annotated[Severity | None, Query(description="Exactly this severity")] = None,
    rule: RuleId = None,
    limit: Limit = 100,
    before: IntCursor = None,
) -> Page[AlertRecord, int]:
    """By severity, worst first, then newest first (docs/contract.md section 13). `next_before` is
    the last alert's id; the next page continues after that alert's place in this order."""
    if severity is not None and min_severity is not None:
        raise contradiction(("severity", "min_severity"), "give severity or min_severity, not both")
    after = queries.find_alert(session, before) if before is not None else None
    before_rank = after.severity.rank if after is not None else None  # gone: every alert older than it
    rows = queries.list_alerts(
        session,
        states=state.states(),
        server_id=server_id_or_404(session, server) if server is not None else None,
        min_severity=min_severity,
        severity=severity,
        rule=rule,
        limit=limit + 1,
        before=before,
        before_rank=before_rank,
        worst_first=True,
    )
    return Page.of(silences.mark_silenced(session, rows, web.now()), limit, lambda alert: alert.id)


class AlertNote(BaseModel):
    """Who acknowledges or resolves an alert, and why: shown on the alert's page."""

    model_config = ConfigDict(extra="forbid")

    note: str | None = Field(default=None, max_length=2000, pattern=NO_NUL)
    by: str | None = Field(
        default=None,
        max_length=200,
        pattern=NO_NUL,
        description="Free text kept in the note (`for <by>: ...`); who acted is the token's name",
    )

    def text(self) -> str | None:
        """The note, with an earlier release's `by` kept in it as text, never as the actor."""
        return f"for {self.by}: {self.note or ''}".rstrip(": ") if self.by else self.note


CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorOut, "description": "The alert is already resolved"}
}


@router.get(
    "/alerts/{alert_id}",
    summary="One alert, its findings and its deliveries",
    dependencies=[Depends(may_read)],
    responses=not_found("alert"),
)
def get_alert(
    web: Web, alert: Annotated[AlertRecord, Depends(alert_or_404)], session: ReadSession
) -> AlertDetail:
    detail = queries.alert_detail(session, alert.id)
    assert detail is not None  # alert_or_404 found it in this same transaction
    (marked,) = silences.mark_silenced(session, [detail.alert], web.now())
    return detail.model_copy(update={"alert": marked})


@router.post(
    "/alerts/{alert_id}/ack",
    summary="Acknowledge an alert",
    dependencies=[Depends(may_respond)],
    responses={**WRITE_ERRORS, **not_found("alert"), **CONFLICT},
)
def ack_alert(
    web: Web,
    alert: Annotated[AlertRecord, Depends(alert_or_404)],
    act: Acting,
    body: AlertNote | None = None,
) -> AlertRecord:
    """Through `monitor.notify.alerts`, which owns alert state; answers the alert as it now is."""
    note = body or AlertNote()
    try:
        handling.acknowledge(
            act.session, alert.id, act.at, by=act.actor, note=note.text(), policy=web.alerting
        )
    except handling.AlertResolved as exc:
        raise HTTPException(409, str(exc)) from None
    act.record("alert.acknowledge", f"alert {alert.id}", note=note.text())
    return _as_now(act.session, alert.id)


@router.post(
    "/alerts/{alert_id}/resolve",
    summary="Resolve an alert by hand",
    dependencies=[Depends(may_respond)],
    responses={**WRITE_ERRORS, **not_found("alert"), **CONFLICT},
)
def resolve_alert(
    web: Web,
    alert: Annotated[AlertRecord, Depends(alert_or_404)],
    act: Acting,
    body: AlertNote | None = None,
) -> AlertRecord:
    """Webhooks that heard it open hear `alert.resolved`; a condition still present opens a new alert."""
    note = body or AlertNote()
    try:
        handling.resolve_by_hand(
            act.session, alert.id, act.at, by=act.actor, note=note.text(), policy=web.alerting
        )
    except handling.AlertResolved as exc:
        raise HTTPException(409, str(exc)) from None
    act.record("alert.resolve", f"alert {alert.id}", note=note.text())
    return _as_now(act.session, alert.id)


def _as_now(session: WriteSession, alert_id: int) -> AlertRecord:
    record = queries.find_alert(session, alert_id)
    assert record is not None  # alert_or_404 found it in this same transaction
    return record
