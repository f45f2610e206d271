"""One alert's own page (`/alerts/{id}`, the `url` of its webhooks): what it is, why, who saw it, and
resolving it by hand. Acknowledging posts to the alerts page's form handler with a note."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from monitor.approvals.api import point_of
from monitor.core.rules import Severity
from monitor.core.states import DecisionKind
from monitor.identity.callers import page_read, page_respond
from monitor.notify import handling, silences
from monitor.sessions import service as host_sessions
from monitor.store import queries
from monitor.store.records import AlertDetail, AlertRecord, ChangeRecord
from monitor.web.acts import Acting
from monitor.web.context import WebContext
from monitor.web.csrf import CheckedForm, form_text
from monitor.web.deps import ReadSession, Web, alert_or_404
from monitor.web.diffview import ToolDiffView, tool_diff_view
from monitor.web.rendering import redirect_with, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
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
        view_pairs=_view_pairs(detail.findings),
        timeline=timeline(detail),
        **at_a_glance(request, web, session, detail.alert, diffs),
        durations=SILENCE_PRESETS,
    )


def _view_pairs(findings: Iterable[ChangeRecord]) -> list[tuple[str, str]]:
    """The client views `listing-varies-by-client` findings compared: each pair links to both listings."""
    pairs = set()
    for finding in findings:
        views = finding.detail.get("views") if isinstance(finding.detail, dict) else None
        if isinstance(views, list) and len(views) == 2 and all(isinstance(view, str) for view in views):
            pairs.add((views[0], views[1]))
    return sorted(pairs)


SILENCE_PRESETS = ("1h", "4h", "1d")
"""The alert page's one-click silences: an hour, a shift, a day."""
TOOLS_SHOWN = 10
"""Changed tools shown inline on a session alert's page (what the session missed); the diff has all."""


def at_a_glance(
    request: Request, web: WebContext, session: Session, alert: AlertRecord, diffs: list[tuple[int, int]]
) -> dict[str, Any]:
    """What the alert's page answers without a click: the change before/after (the newest diff of a
    tool alert, or what a stale session missed), what hosts are told about each affected tool now,
    the server's other tools hosts are told to deny or ask about (the decision point's own answers,
    strictest first: what else of the server is held back), and the sessions that still hold an
    older listing than the current one."""
    span = diffs[-1] if diffs else None
    if alert.session_id is not None:
        span = queries.session_diffs(session, [(alert.server, alert.session_id)]).get(
            (alert.server, alert.session_id)
        )
    server_id = queries.server_id(session, alert.server)
    changes: list[ToolDiffView] = []
    if span is not None and server_id is not None:
        found = queries.diff_versions(session, server_id, *span)
        tools = found.tools if found is not None else []
        changes = [tool_diff_view(t) for t in tools if alert.tool is None or t.name == alert.tool][
            :TOOLS_SHOWN
        ]
    current = point_of(request).current(alert.server, session)
    names = {alert.tool} if alert.tool is not None else {c.change.name for c in changes}
    everyone = current[1] if current else {}
    verdicts = {name: v for name, v in everyone.items() if name in names}
    held = [
        (name, v) for name, v in everyone.items() if name not in names and v.decision != DecisionKind.ALLOW
    ]
    others = dict(sorted(held, key=lambda item: (-item[1].decision.strictness, item[0])))
    behind = [
        s
        for s in host_sessions.list_sessions(
            session, stale_only=False, now=web.now(), grace=web.session_grace
        )
        if s.server == alert.server and s.current_fingerprint and s.fingerprint != s.current_fingerprint
    ]
    server = queries.find_server(session, alert.server)
    return {
        "span": span,
        "changes": changes,
        "verdicts": verdicts,
        "others": others,
        "behind": behind,
        "server": server,
    }


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
