"""Rendering pages: the Jinja environment (with the filters of `monitor.web.filters`), the page and
error-page responses, the dashboard session cookie and the message shown after an action."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from monitor.core.roles import Permission, Via
from monitor.core.states import AlertState
from monitor.identity.callers import caller_of
from monitor.identity.signin import FLASH_COOKIE, FLASH_SECONDS, SESSION_COOKIE
from monitor.store import queries
from monitor.store.records import SEVERITIES
from monitor.web.deps import context_of
from monitor.web.filters import (
    ago,
    as_text,
    compact_json,
    definition_href,
    finalize,
    fingerprint_code,
    format_time,
    format_utc,
    format_when,
    iso,
    json_block,
    marked_quote,
    path_quote,
    plain,
    pretty_json,
    readable,
    severity_badge,
    severity_class,
    status_badge,
    tool_href,
    tool_title,
    visible,
)


def make_environment(templates: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        visible=visible,
        plain=plain,
        ts=format_time,
        utc=format_utc,
        readable=readable,
        when=format_when,
        iso=iso,
        pathq=path_quote,
        toolhref=tool_href,
        pretty=pretty_json,
        compact=compact_json,
        sevclass=severity_class,
    )
    env.globals.update(
        severities=SEVERITIES,
        as_text=as_text,
        tool_title=tool_title,
        sev=severity_badge,
        status=status_badge,
        fp=fingerprint_code,
        json_block=json_block,
        marked_quote=marked_quote,
        definition_href=definition_href,
    )
    return env


def render(
    request: Request, session: Session, template: str, status_code: int = 200, **values: Any
) -> HTMLResponse:
    """The page, with what every page shows: who is signed in and what they may do, the open-alert
    count in the navigation (only for callers who may read; read in `session`, and left out when the
    database fails, so error pages still render), the message after an action, and the CSRF token
    its forms carry, bound to the visitor's session (a new session cookie for a first visit)."""
    web = context_of(request)
    identity = web.identity
    caller = caller_of(request)
    sid, new_session = caller.session, None
    if sid is None:
        signed, new_session = identity.signer.new_session("", time.time(), 12 * 3600)
        sid = signed.sid
    flash_cookie = request.cookies.get(FLASH_COOKIE, "")
    flash = identity.signer.read_flash(flash_cookie) if flash_cookie else None
    values.setdefault("refresh", None)
    alert_counts: dict[AlertState, int] | None = None
    if caller.may(Permission.READ):
        try:
            alert_counts = queries.alert_state_counts(session)
        except SQLAlchemyError:
            alert_counts = None
    page = (
        env_of(request)
        .get_template(template)
        .render(
            request=request,
            csrf_token=identity.signer.csrf(sid),
            auth_enabled=caller.via != Via.OPEN,
            signed_in=caller.known,
            caller=caller,
            may=lambda permission: caller.may(Permission(permission)),
            flash=flash,
            token_env=web.token_env,
            now=web.now(),
            ago=lambda value: ago(value, web.now()),
            static_version=request.app.state.static_version,
            open_alerts=alert_counts,
            **values,
        )
    )
    # Every string went through `finalize`; "replace" only guards against a template bug.
    response = HTMLResponse(page.encode("utf-8", "replace"), status_code=status_code)
    if new_session is not None:
        session_cookie(response, request, new_session, 12 * 3600)
    if flash_cookie:
        response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
    return response


def env_of(request: Request) -> Environment:
    env: Environment = request.app.state.templates
    return env


def session_cookie(response: Response, request: Request, value: str, max_age: int) -> None:
    """The dashboard session cookie: `HttpOnly`, `SameSite=Strict`, `Secure` over HTTPS."""
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def redirect_with(request: Request, target: str, message: str) -> RedirectResponse:
    """A 303 to `target` carrying `message` for the next page's banner, in a signed cookie: the server
    chooses what the banner says, never the URL."""
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        FLASH_COOKIE,
        context_of(request).identity.signer.flash(message),
        max_age=FLASH_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


def error_page(request: Request, status_code: int, message: str) -> HTMLResponse:
    """For the exception handlers, which run outside any handler's session: one of its own."""
    with context_of(request).store.sessions() as session:
        return render(
            request, session, "error.html", status_code, status=status_code, message=message, nav=""
        )
