"""The alerts page, and acknowledging an alert from it."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from monitor.core.ijson import storable
from monitor.core.states import AlertStateFilter
from monitor.identity.callers import page_read, page_respond
from monitor.notify import handling, silences
from monitor.store import queries
from monitor.store.records import AlertRecord
from monitor.web.acts import Acting
from monitor.web.csrf import CheckedForm, form_text
from monitor.web.deps import ReadSession, Web, alert_or_404, find_server_or_404
from monitor.web.params import exact_severity_param, safe_next
from monitor.web.refresh import auto_refresh
from monitor.web.rendering import redirect_with, render
from monitor.web.schemas import INT32_MAX

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
ALERTS_PER_PAGE = 100


STATE_CHOICES = tuple(AlertStateFilter)
"""`unresolved` (open and acknowledged) is the default: an acknowledged alert is still an incident."""


def _cursor(value: str | None) -> tuple[int, int] | None:
    """`rank-id` of the previous page's last row (the page is ordered worst first, then newest)."""
    if not value:
        return None
    rank, _, alert_id = value.partition("-")
    if not rank.isdigit() or not alert_id.isdigit() or int(rank) > 9 or int(alert_id) > INT32_MAX:
        raise HTTPException(422, "before: expected the next-page link's value (severity rank-alert id)")
    return int(rank), int(alert_id)


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(
    request: Request,
    web: Web,
    session: ReadSession,
    state: str = "unresolved",
    severity: str | None = None,
    server: str | None = None,
    rule: str | None = None,
    before: str | None = None,
) -> HTMLResponse:
    """Worst first, then newest; filtered by state, severity, server and rule."""
    if state not in STATE_CHOICES:
        raise HTTPException(422, f"state: expected one of {', '.join(STATE_CHOICES)}")
    exact = exact_severity_param(severity)
    if rule is not None and (not storable(rule) or len(rule) > 64):
        raise HTTPException(422, "rule: expected a rule id")
    cursor = _cursor(before)
    rows = queries.list_alerts(
        session,
        states=AlertStateFilter(state).states(),
        severity=exact,
        server_id=find_server_or_404(session, server).id if server else None,
        rule=rule or None,
        worst_first=True,
        limit=ALERTS_PER_PAGE + 1,
        before=cursor[1] if cursor else None,
        before_rank=cursor[0] if cursor else None,
    )
    more = len(rows) > ALERTS_PER_PAGE
    rows = silences.mark_silenced(session, rows[:ALERTS_PER_PAGE], web.now())
    filters = {
        "state": state,
        **({"severity": exact.value} if exact else {}),
        **({"server": server} if server else {}),
        **({"rule": rule} if rule else {}),
    }
    here = urlencode({**filters, **({"before": before} if cursor else {})})
    older = f"{rows[-1].severity.rank}-{rows[-1].id}" if more else None
    return render(
        request,
        session,
        "alerts.html",
        nav="alerts",
        refresh=auto_refresh(request),
        alerts=rows,
        diffs=queries.alert_diffs(session, [a.id for a in rows]),
        session_diffs=queries.session_diffs(
            session, [(a.server, a.session_id) for a in rows if a.session_id is not None]
        ),
        state=state,
        severity=exact.value if exact else "",
        server=server or "",
        rule=rule or "",
        filtered=bool(exact or server or rule),
        server_names=queries.server_names(session),
        rules=sorted({*queries.alert_rules(session), *([rule] if rule else [])}),
        states=queries.alert_state_counts(session),
        older=urlencode({**filters, "before": older}) if older else None,
        here=f"/alerts?{here}",
    )


@router.post("/alerts/{alert_id}/ack", response_class=HTMLResponse)
def acknowledge(
    request: Request,
    web: Web,
    fields: CheckedForm,
    _responder: Annotated[None, Depends(page_respond)],
    alert: Annotated[AlertRecord, Depends(alert_or_404)],
    act: Acting,
) -> Response:
    """Acknowledged through `monitor.notify.alerts`, which owns alert state; back to where the form was.
    The form is checked first, then who posted it, then the alert (the parameters' order)."""
    note = form_text(fields, "note")
    try:
        handling.acknowledge(act.session, alert.id, act.at, by=act.actor, note=note, policy=web.alerting)
    except handling.AlertResolved as exc:
        raise HTTPException(409, str(exc)) from None
    act.record("alert.acknowledge", f"alert {alert.id}", note=note)
    target = safe_next(fields.get("next"), "/alerts")
    return redirect_with(request, target, f"Alert {alert.id} acknowledged by {act.actor}.")
