"""Signing in to the dashboard with a token, and out; the audit page.

A person signs in with a named token (or the configured one, as `api_token_name`): the session
cookie names the token, never holds it, and the token is checked again at every request, so revoking
it signs the session out. The page after signing in says who the person now is. Behind a trusted
authenticating proxy nobody signs in here: the proxy says who they are. Every sign-in, failed or
not, and every sign-out is in the audit log.
"""

from __future__ import annotations

import hmac
import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from monitor.core.roles import CONFIG_NAME, Caller, Permission, Via
from monitor.identity.callers import Identity, TheCaller, require_page
from monitor.identity.storage import audit_events, named_caller, record_event, token_caller
from monitor.web.csrf import CheckedForm
from monitor.web.deps import ReadSession, Web, WriteSession
from monitor.web.params import number_param, safe_next
from monitor.web.rendering import redirect_with, render, session_cookie

router = APIRouter(include_in_schema=False)
"""The sign-in pages are reachable before signing in; the audit page needs an admin."""
AUDIT_PER_PAGE = 100


@router.get("/login", response_class=HTMLResponse)
def login_page(
    request: Request, web: Web, caller: TheCaller, session: ReadSession, next: str | None = None
) -> HTMLResponse:
    return render(
        request,
        session,
        "login.html",
        nav="",
        next_path=safe_next(next),
        error="",
        token_name=web.identity.token_name,
    )


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request, fields: CheckedForm, web: Web, session: WriteSession, caller: TheCaller
) -> Response:
    identity: Identity = web.identity
    next_path = safe_next(fields.get("next"))
    given = fields.get("token", "").strip()
    found = _token_owner(identity, session, given, caller.source)
    if found is None:
        identity.refuse(caller, "auth.sign-in", "dashboard", "not a valid token")
        error = "That is not a valid token (it may have been revoked or have expired)."
        if identity.token is None and identity.open():
            error = "No token is configured or made yet, so the dashboard is read-only and needs no sign-in."
        return render(
            request,
            session,
            "login.html",
            401,
            nav="",
            next_path=next_path,
            error=error,
            token_name=identity.token_name,
        )
    key, who = found
    record_event(session, who, "auth.sign-in", "dashboard", at=web.now())
    role = who.role.value if who.role else "no role"
    response = redirect_with(request, next_path, f"Signed in as {who.name} ({role}).")
    _, value = identity.signer.new_session(key, time.time(), identity.auth.session_hours * 3600)
    session_cookie(response, request, value, int(identity.auth.session_hours * 3600))
    return response


def _token_owner(
    identity: Identity, session: ReadSession, given: str, source: str
) -> tuple[str, Caller] | None:
    """Whose token `given` is: the name its dashboard session keeps (`CONFIG_NAME` for the configured
    token, whatever it is called) and the caller it signs in as."""
    if not given:
        return None
    if identity.token is not None and hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), identity.token.encode("utf-8", "surrogatepass")
    ):
        return CONFIG_NAME, identity.configured(Via.SESSION, source)
    found = token_caller(session, given, identity.clock(), source)
    if found is None:
        return None
    named = named_caller(session, found.name, identity.clock(), source, Via.SESSION)
    return None if named is None else (named.name, named)


@router.post("/logout", response_class=HTMLResponse)
def logout(
    request: Request, _fields: CheckedForm, web: Web, session: WriteSession, caller: TheCaller
) -> Response:
    if caller.known:
        record_event(session, caller, "auth.sign-out", "dashboard", at=web.now())
    response = RedirectResponse("/login", status_code=303)
    _, value = web.identity.signer.new_session("", time.time(), 3600)
    session_cookie(response, request, value, 3600)
    return response


@router.get("/audit", response_class=HTMLResponse, dependencies=[Depends(require_page(Permission.ADMIN))])
def audit_page(
    request: Request,
    session: ReadSession,
    before: str | None = None,
    result: str | None = None,
) -> HTMLResponse:
    older = number_param(before, "before")
    shown = result if result in ("ok", "refused") else None
    events = audit_events(session, limit=AUDIT_PER_PAGE, before=older, result=shown)
    return render(
        request,
        session,
        "audit.html",
        nav="audit",
        events=events,
        result=shown or "",
        older=events[-1].id if len(events) == AUDIT_PER_PAGE else None,
    )
