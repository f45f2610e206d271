"""Signing in to the dashboard with the API token, and out: a signed, expiring cookie, never the token."""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from monitor.core.text import is_hidden
from monitor.webapp.context import SESSION_COOKIE, SESSION_SECONDS, session_cookie_value
from monitor.webapp.deps import ReadSession, Web
from monitor.webapp.pages.csrf import CheckedForm
from monitor.webapp.pages.rendering import render

router = APIRouter(include_in_schema=False)
"""The sign-in pages, reachable before signing in."""


def safe_next(value: str | None, default: str = "/") -> str:
    """Only local paths: no scheme, no host, no `//` or backslash tricks, no line breaks."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(c in value for c in "\r\n\\") or any(is_hidden(c) for c in value):
        return default
    return value


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, web: Web, session: ReadSession, next: str | None = None) -> HTMLResponse:
    return render(
        request,
        session,
        "login.html",
        nav="",
        next_path=safe_next(next),
        error="",
        configured=web.token is not None,
    )


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, fields: CheckedForm, web: Web, session: ReadSession) -> Response:
    next_path = safe_next(fields.get("next"))
    if web.token is None:
        return render(
            request,
            session,
            "login.html",
            403,
            nav="",
            next_path=next_path,
            configured=False,
            error="No API token is configured, so there is nothing to sign in with.",
        )
    given = fields.get("token", "").strip()
    if not hmac.compare_digest(given.encode("utf-8", "replace"), web.token.encode("utf-8")):
        return render(
            request,
            session,
            "login.html",
            401,
            nav="",
            next_path=next_path,
            configured=True,
            error="That is not the configured API token.",
        )
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_cookie_value(web, time.time()),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout", response_class=HTMLResponse)
def logout(_fields: CheckedForm) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
