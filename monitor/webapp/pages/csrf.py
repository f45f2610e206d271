"""Forms: a signed double-submit CSRF token, and form posts refused from other origins."""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import Depends, Request

from monitor.webapp.context import WebContext
from monitor.webapp.deps import Web

CSRF_COOKIE = "dm_csrf"
MAX_FORM_BYTES = 16 * 1024


def _csrf_valid(web: WebContext, value: str) -> bool:
    nonce, _, signature = value.partition(".")
    return bool(nonce) and hmac.compare_digest(signature.encode(), web.sign("csrf", nonce).encode())


def csrf_token(web: WebContext, request: Request) -> tuple[str, bool]:
    """The request's CSRF token (reused while valid) and whether it must be set as a cookie."""
    current = request.cookies.get(CSRF_COOKIE, "")
    if current and _csrf_valid(web, current):
        return current, False
    nonce = secrets.token_urlsafe(24)
    return f"{nonce}.{web.sign('csrf', nonce)}", True


class FormRefused(Exception):
    """A form post that fails the CSRF or origin check: answered 403, never acted on."""


async def checked_form(request: Request, web: Web) -> dict[str, str]:
    """The url-encoded form, after the same-origin and double-submit CSRF checks.

    Async to read the body; it touches no database, and the handlers taking it are sync."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise FormRefused("cross-site form posts are refused")
    origin = request.headers.get("origin")
    # "null" is what privacy settings and sandboxed frames send; the CSRF token still has to match.
    if origin is not None and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise FormRefused("the form was posted from another origin")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_FORM_BYTES):
        raise FormRefused("the form is too large")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise FormRefused("the form is too large")
    fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = fields.get("csrf_token", "")
    if not cookie or not given or not hmac.compare_digest(cookie.encode(), given.encode("utf-8", "replace")):
        raise FormRefused(
            "the form's CSRF token is missing or does not match (reload the page and try again)"
        )
    if not _csrf_valid(web, cookie):
        raise FormRefused("the CSRF token is not valid (reload the page and try again)")
    return fields


CheckedForm = Annotated[dict[str, str], Depends(checked_form)]
