"""The silences page: what is muted, by whom and why, until when; creating and expiring silences."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from monitor.config import parse_duration
from monitor.core.text import make_visible
from monitor.silences import service as silences
from monitor.webapp.deps import ReadSession, Web, WriteSession, require_editor, require_viewer, signed_in
from monitor.webapp.pages.alert import form_text
from monitor.webapp.pages.csrf import CheckedForm
from monitor.webapp.pages.params import number_param
from monitor.webapp.pages.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])


@router.get("/silences", response_class=HTMLResponse)
def silences_page(request: Request, web: Web, session: ReadSession) -> HTMLResponse:
    params = request.query_params
    return render(
        request,
        session,
        "silences.html",
        nav="silences",
        silences=silences.list_silences(session, now=web.now(), active_only=False, limit=200),
        can_write=signed_in(web, request),
        flash=params.get("done", ""),
        prefill={key: params.get(key, "") for key in ("server", "tool", "rule")},
    )


@router.post("/silences", response_class=HTMLResponse)
def create(
    web: Web, fields: CheckedForm, _editor: Annotated[None, Depends(require_editor)], session: WriteSession
) -> Response:
    now = web.now()
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
            created_by=form_text(fields, "by") or "",
            reason=form_text(fields, "reason") or "",
            now=now,
        )
    except silences.SilenceError as exc:
        raise HTTPException(422, str(exc)) from None
    return RedirectResponse(f"/silences?done=created-{record.id}", status_code=303)


@router.post("/silences/{silence_id}/expire", response_class=HTMLResponse)
def expire(
    web: Web,
    silence_id: str,
    _fields: CheckedForm,
    _editor: Annotated[None, Depends(require_editor)],
    session: WriteSession,
) -> Response:
    number = number_param(silence_id, "silence_id")
    if number is None or silences.expire_silence(session, number, web.now()) is None:
        raise HTTPException(404, f"no silence {make_visible(silence_id)}")
    return RedirectResponse(f"/silences?done=expired-{number}", status_code=303)
