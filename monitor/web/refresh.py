"""Pages that watch a fleet refresh themselves; the person reading them can turn that off.

A `<meta http-equiv="refresh">` needs no script, so the Content-Security-Policy stays script-free.
The choice is a cookie (not a secret, no sign-in needed), set by a CSRF-checked form post and kept
for a year; every auto-refreshing page shows the state and the button that flips it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from monitor.web.csrf import CheckedForm
from monitor.web.params import safe_next

REFRESH_COOKIE = "dm_refresh"
REFRESH_SECONDS = 60
"""How often the overview, alerts and sessions pages reload while auto-refresh is on."""

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class AutoRefresh:
    """What a page tells base.html: its interval, whether the reader left it on, and where it is."""

    seconds: int
    on: bool
    here: str


def auto_refresh(request: Request) -> AutoRefresh:
    query = request.url.query
    here = request.url.path + (f"?{query}" if query else "")
    return AutoRefresh(REFRESH_SECONDS, request.cookies.get(REFRESH_COOKIE) != "off", here)


@router.post("/refresh")
def set_refresh(request: Request, fields: CheckedForm) -> Response:
    """Turn auto-refresh on or off for this browser, and go back to the page."""
    turn_on = fields.get("refresh") == "on"
    response = RedirectResponse(safe_next(fields.get("next")), status_code=303)
    response.set_cookie(
        REFRESH_COOKIE,
        "on" if turn_on else "off",
        max_age=365 * 24 * 3600,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response
