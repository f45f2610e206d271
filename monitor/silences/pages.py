"""The silences page: what is muted, by whom and why, until when; creating and expiring silences."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from monitor.config import parse_duration
from monitor.core.rules import CATALOG
from monitor.core.text import make_visible
from monitor.identity.acts import Acting
from monitor.identity.callers import page_read, page_respond
from monitor.notify import handling
from monitor.silences import service as silences
from monitor.webapp.deps import ReadSession, Web
from monitor.webapp.pages.alert import form_text
from monitor.webapp.pages.csrf import CheckedForm
from monitor.webapp.pages.params import number_param, safe_next
from monitor.webapp.pages.rendering import redirect_with, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
DURATIONS = ("1h", "4h", "1d", "7d")
"""The form's presets: an hour, a shift, a day, a week."""


@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request, web: Web, session: ReadSession) -> HTMLResponse:
    params = request.query_params
    return render(
        request,
        session,
        "silences.html",
        nav="silences",
        silences=silences.list_silences(session, now=web.now(), active_only=False, limit=200),
        prefill={key: params.get(key, "") for key in ("server", "tool", "rule")},
        resolve_alert=number_param(params.get("alert"), "alert"),
        rules=sorted(CATALOG),
        durations=DURATIONS,
    )


@router.post("/silences", response_class=HTMLResponse)
def create(
    request: Request,
    web: Web,
    fields: CheckedForm,
    _responder: Annotated[None, Depends(page_respond)],
    act: Acting,
) -> Response:
    session, now = act.session, act.at
    try:
        duration = parse_duration(fields.get("duration", "").strip())
        ends_at = now + timedelta(seconds=duration)
    except (ValueError, OverflowError) as exc:
        raise HTTPException(422, f"duration: {make_visible(str(exc))}") from None
    try:
        record = silences.create_silence(
            session,
            server=form_text(fields, "server"),
            tool=form_text(fields, "tool"),
            rule=form_text(fields, "rule"),
            ends_at=ends_at,
            created_by=act.actor,
            reason=form_text(fields, "reason") or "",
            now=now,
        )
    except silences.SilenceError as exc:
        raise HTTPException(422, str(exc)) from None
    act.record(
        "silence.create", f"silence {record.id}", ends_at=record.ends_at.isoformat(), reason=record.reason
    )
    if fields.get("resolve_alerts") == "on":
        resolved = handling.resolve_silenced(session, record, now, by=act.actor, policy=web.alerting)
        act.record("alert.resolve", f"silence {record.id}", alerts=resolved)
        back = safe_next(fields.get("next"), "/silences")
        done = f"; alerts resolved: {', '.join(map(str, resolved))}" if resolved else ""
        return redirect_with(request, back, f"Silence {record.id} created by {act.actor}{done}.")
    return redirect_with(request, "/silences", f"Silence {record.id} created by {act.actor}.")


@router.post("/silences/{silence_id}/expire", response_class=HTMLResponse)
def expire(
    request: Request,
    silence_id: str,
    _fields: CheckedForm,
    _responder: Annotated[None, Depends(page_respond)],
    act: Acting,
) -> Response:
    number = number_param(silence_id, "silence_id")
    if number is None or silences.expire_silence(act.session, number, act.at) is None:
        raise HTTPException(404, f"no silence {make_visible(silence_id)}")
    act.record("silence.expire", f"silence {number}")
    return redirect_with(request, "/silences", f"Silence {number} expired by {act.actor}.")
