"""One alert's own page (`/alerts/{id}`, the `url` of its webhooks): what it is, why, who saw it, and
resolving it by hand. Acknowledging posts to the alerts page's form handler with a note."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from monitor.core.rules import Severity
from monitor.identity.acts import Acting
from monitor.identity.callers import page_read, page_respond
from monitor.notify import handling
from monitor.silences import service as silences
from monitor.store import queries
from monitor.store.records import AlertDetail, AlertRecord
from monitor.webapp.deps import (
    ReadSession,
    Web,
    alert_or_404,
)
from monitor.webapp.pages.csrf import CheckedForm
from monitor.webapp.pages.rendering import redirect_with, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
NOTE_LIMIT = 2000
"""Longest name or note a form keeps (the rest is cut): the page shows it whole."""


@dataclass(frozen=True)
class Moment:
    """One line of the alert's timeline."""

    at: datetime
    what: str
    note: str | None = None


def timeline(detail: AlertDetail) -> list[Moment]:
    """Opened, each finding it gathered, each delivery, acknowledged and resolved, in time order."""
    alert = detail.alert
    moments = [Moment(alert.opened_at, "opened")]
    moments += _findings(detail)
    for delivery in detail.deliveries:
        moments.append(
            Moment(delivery.created_at, f"{delivery.event_type} queued for webhook {delivery.webhook}")
        )
        if delivery.delivered_at is not None:
            tries = f"after {delivery.attempts} attempt(s)"
            moments.append(
                Moment(
                    delivery.delivered_at, f"{delivery.event_type} delivered to {delivery.webhook} {tries}"
                )
            )
    if alert.acknowledged_at is not None:
        who = f" by {alert.acknowledged_by}" if alert.acknowledged_by else ""
        moments.append(Moment(alert.acknowledged_at, f"acknowledged{who}", alert.ack_note))
    if alert.resolved_at is not None:
        moments.append(Moment(alert.resolved_at, f"resolved: {alert.resolution}"))
    return sorted(moments, key=lambda moment: moment.at)


def _findings(detail: AlertDetail) -> list[Moment]:
    """Each finding; one of a standing condition (a session behind) that changed the alert's severity
    in place reads as the severity raised or lowered, from what to what."""
    moments = []
    previous: str | None = None
    for finding in detail.findings:
        severity = finding.severity.value
        if detail.alert.session_id is not None and previous is not None and severity != previous:
            way = "raised" if finding.severity.rank > Severity(previous).rank else "lowered"
            moments.append(
                Moment(finding.detected_at, f"severity {way} from {previous} to {severity}", finding.message)
            )
        else:
            moments.append(
                Moment(finding.detected_at, f"finding: {severity} {finding.rule}", finding.message)
            )
        previous = severity
    return moments


@router.get("/alerts/{alert_id}", response_class=HTMLResponse)
def alert_page(
    request: Request, web: Web, alert: Annotated[AlertRecord, Depends(alert_or_404)], session: ReadSession
) -> HTMLResponse:
    detail = queries.alert_detail(session, alert.id)
    assert detail is not None  # alert_or_404 found it in this same transaction
    (marked,) = silences.mark_silenced(session, [detail.alert], web.now())
    detail = detail.model_copy(update={"alert": marked})
    diffs = sorted(
        {(f.from_version, f.to_version) for f in detail.findings if f.from_version and f.to_version}
    )
    return render(
        request,
        session,
        "alert.html",
        nav="alerts",
        detail=detail,
        a=detail.alert,
        diffs=diffs,
        timeline=timeline(detail),
    )


@router.post("/alerts/{alert_id}/resolve", response_class=HTMLResponse)
def resolve(
    request: Request,
    web: Web,
    fields: CheckedForm,
    _responder: Annotated[None, Depends(page_respond)],
    alert: Annotated[AlertRecord, Depends(alert_or_404)],
    act: Acting,
) -> Response:
    """Through `monitor.notify.alerts`, so the webhooks that heard it open hear it resolved, and by whom."""
    note = form_text(fields, "note")
    try:
        handling.resolve_by_hand(act.session, alert.id, act.at, by=act.actor, note=note, policy=web.alerting)
    except handling.AlertResolved as exc:
        raise HTTPException(409, str(exc)) from None
    act.record("alert.resolve", f"alert {alert.id}", note=note)
    return redirect_with(request, f"/alerts/{alert.id}", f"Alert {alert.id} resolved by {act.actor}.")


def form_text(fields: dict[str, str], name: str) -> str | None:
    """A trimmed form field, cut to NOTE_LIMIT and without NUL; None when left empty."""
    value = fields.get(name, "").replace("\x00", "").strip()[:NOTE_LIMIT]
    return value or None
