"""Forms: a CSRF token bound to the visitor's session, and form posts refused from anywhere else.

A form post is acted on only when it comes from this origin (`Sec-Fetch-Site` same-origin, or absent
as from a script; an `Origin` that is this host, or absent) and carries the CSRF token of the
poster's own session (`monitor.identity.signin`). Another site, another port of this host (which can
set cookies for it, but not read this session's token), a sandboxed frame (`Origin: null`) or a
redirect from elsewhere is refused, and the refusal is audited. A request authenticated by a bearer
token needs no CSRF token: browsers never send one on their own.
"""

from __future__ import annotations

import hmac
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import Depends, Request

from monitor.core.roles import Via
from monitor.identity.callers import caller_of
from monitor.web.deps import Web

MAX_FORM_BYTES = 16 * 1024
ALLOWED_FETCH_SITES = ("same-origin", "none")
"""`Sec-Fetch-Site` values of a form this dashboard served (`none`: typed or bookmarked by a person)."""


class FormRefused(Exception):
    """A form post that fails the CSRF or origin check: answered 403, never acted on."""


async def checked_form(request: Request, web: Web) -> dict[str, str]:
    """The url-encoded form, after the origin and CSRF checks.

    Async to read the body; it touches no database, and the handlers taking it are sync."""
    caller = caller_of(request)

    def refuse(why: str) -> FormRefused:
        web.identity.refuse(caller, "form.refused", f"{request.method} {request.url.path}", why)
        return FormRefused(why)

    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ALLOWED_FETCH_SITES:
        raise refuse(f"form posts from another site or origin are refused (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is not None and (
        origin == "null" or urlsplit(origin).netloc != request.headers.get("host", "")
    ):
        raise refuse("the form was posted from another origin")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_FORM_BYTES):
        raise refuse("the form is too large")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise refuse("the form is too large")
    fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
    if caller.via == Via.TOKEN:
        return fields
    given = fields.get("csrf_token", "")
    expected = web.identity.signer.csrf(caller.session) if caller.session else ""
    if (
        not given
        or not expected
        or not hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))
    ):
        raise refuse("the form's CSRF token is missing or not this session's (reload the page and try again)")
    return fields


CheckedForm = Annotated[dict[str, str], Depends(checked_form)]


NOTE_LIMIT = 2000
"""Characters kept of a note or reason typed into a form."""


def form_text(fields: dict[str, str], name: str) -> str | None:
    """A trimmed form field, cut to NOTE_LIMIT and without NUL; None when left empty."""
    value = fields.get(name, "").replace("\x00", "").strip()[:NOTE_LIMIT]
    return value or None
