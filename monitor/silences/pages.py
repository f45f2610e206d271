"""The silences page: what is muted, by whom and why, until when; creating and expiring silences."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from monitor.config import parse_duration
from monitor.core.rules import CATALOG
from monitor.core.text import make_visible
from monitor.identity.callers import page_read, page_respond
from monitor.notify import handling, silences
from monitor.web.acts import Acting
from monitor.web.context import WebContext
from monitor.web.csrf import CheckedForm, form_text
from monitor.web.deps import ReadSession, Web
from monitor.web.params import number_param, safe_next
from monitor.web.rendering import redirect_with, render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
DURATIONS = ("1h", "4h", "1d", "7d")
"""The form's presets: an hour, a shift, a day, a week."""
FORM_FIELDS = ("server", "tool", "rule", "reason", "duration", "other")
"""The form's fields, all shown again as typed when it is refused."""
LINK_FIELDS = ("server", "tool", "rule")
"""What a link to the page may prefill (an alert's "Silence this…")."""


@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request, web: Web, session: ReadSession) -> HTMLResponse:
    params = request.query_params
    typed = {key: params.get(key, "") if key in LINK_FIELDS else "" for key in FORM_FIELDS}
    return _page(request, web, session, typed, number_param(params.get("alert"), "alert"))


def _page(
    request: Request,
    web: WebContext,
    session: Session,
    typed: dict[str, str],
    resolve_alert: int | None,
    error: str | None = None,
) -> HTMLResponse:
    """The page; after a refused form, with 422, what was wrong, and the form as it was typed."""
    return render(
        request,
        session,
        "silences.html",
        status_code=200 if error is None else 422,
        nav="silences",
        silences=silences.list_silences(session, now=web.now(), active_only=False, limit=200),
        prefill=typed,
        form_error=error,
        resolve_alert=resolve_alert,
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
    typed = {key: fields.get(key, "") for key in FORM_FIELDS}
    from_alert = re.fullmatch(r"/alerts/(\d{1,18})", safe_next(fields.get("next"), ""))
    resolve_alert = int(from_alert.group(1)) if from_alert else None  # the form came from this alert's page
    wanted = typed["other"].strip() or typed["duration"].strip()
    try:
        ends_at = now + timedelta(seconds=parse_duration(wanted))
    except (ValueError, OverflowError) as exc:
        return _page(request, web, session, typed, resolve_alert, f"How long: {make_visible(str(exc))}")
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
        return _page(request, web, session, typed, resolve_alert, str(exc))
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
