"""The alerts page, and acknowledging an alert from it."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from monitor.core.states import AlertState
from monitor.notify import alerts
from monitor.store import queries
from monitor.store.records import AlertRecord
from monitor.webapp.deps import (
    ReadSession,
    Web,
    WriteSession,
    alert_or_404,
    require_editor,
    require_viewer,
    signed_in,
)
from monitor.webapp.pages.alert import form_text
from monitor.webapp.pages.auth import safe_next
from monitor.webapp.pages.csrf import CheckedForm
from monitor.webapp.pages.params import number_param
from monitor.webapp.pages.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])
ALERTS_PER_PAGE = 100


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(
    request: Request, web: Web, session: ReadSession, state: str = "open", before: str | None = None
) -> HTMLResponse:
    if state not in (*AlertState, "all"):
        raise HTTPException(422, "state: expected open, acknowledged, resolved or all")
    cursor = number_param(before, "before")
    rows = queries.list_alerts(
        session,
        state=None if state == "all" else AlertState(state),
        limit=ALERTS_PER_PAGE + 1,
        before=cursor,
    )
    more = len(rows) > ALERTS_PER_PAGE
    rows = rows[:ALERTS_PER_PAGE]
    here = urlencode({"state": state, **({"before": str(cursor)} if cursor else {})})
    return render(
        request,
        session,
        "alerts.html",
        nav="alerts",
        alerts=rows,
        state=state,
        states=queries.alert_state_counts(session),
        older=rows[-1].id if more else None,
        can_write=signed_in(web, request),
        here=f"/alerts?{here}",
        flash=request.query_params.get("done", ""),
    )


@router.post("/alerts/{alert_id}/ack", response_class=HTMLResponse)
def acknowledge(
    web: Web,
    fields: CheckedForm,
    _editor: Annotated[None, Depends(require_editor)],
    alert: Annotated[AlertRecord, Depends(alert_or_404)],
    session: WriteSession,
) -> Response:
    """Acknowledged through `monitor.notify.alerts`, which owns alert state; back to where the form was.
    The form is checked first, then who posted it, then the alert (the parameters' order)."""
    try:
        alerts.acknowledge(
            session, alert.id, web.now(), by=form_text(fields, "by"), note=form_text(fields, "note")
        )
    except alerts.AlertResolved as exc:
        raise HTTPException(409, str(exc)) from None
    target = safe_next(fields.get("next"), "/alerts")
    separator = "&" if "?" in target else "?"
    return RedirectResponse(f"{target}{separator}done={alert.id}", status_code=303)
