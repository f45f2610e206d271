"""FastAPI dependencies: the request's context and database session, who is asking, and resources or 404.

One mechanism keeps every database call off the event loop: whatever touches the database is a
plain `def` (the handlers, the session dependencies below, the lookups, the exception handlers
that render pages), and FastAPI (Starlette, for exception handlers) runs those in its threadpool.
The few `async def` handlers (reading a form body, polling now) get what they need from the
database through the sync dependencies here, never on the loop. Dependencies that only look at the
request (the context, the token and cookie checks) are `async def`: they never block.

A request has one session, closed when its handler returns, before the response is sent; handlers
that change something take `WriteSession`, the same session committed at that point (rolled back
if the handler raises), so a 2xx is only ever sent for a committed change.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import HTTPConnection

from monitor.core.ijson import storable
from monitor.core.text import make_visible
from monitor.store import queries
from monitor.store.records import AlertRecord, ServerRecord
from monitor.webapp.api.schemas import INT32_MAX, SERVER_NAME
from monitor.webapp.context import SESSION_COOKIE, WebContext, session_cookie_valid

BEARER_REQUIRED = "missing or wrong bearer token (Authorization: Bearer <token>)"


def context_of(connection: HTTPConnection) -> WebContext:
    web: WebContext = connection.app.state.web
    return web


async def web_context(request: Request) -> WebContext:
    return context_of(request)


Web = Annotated[WebContext, Depends(web_context)]


# --- the database session --------------------------------------------------------------------


def read_session(web: Web) -> Iterator[Session]:
    with web.store.sessions() as session:
        yield session


ReadSession = Annotated[Session, Depends(read_session, scope="function")]


def write_session(session: ReadSession) -> Iterator[Session]:
    """The request's session, committed when the handler returns and rolled back if it raises."""
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    session.commit()


WriteSession = Annotated[Session, Depends(write_session, scope="function")]


# --- who is asking ---------------------------------------------------------------------------

bearer_scheme = HTTPBearer(
    auto_error=False,
    description="The token from the environment variable named by `api_token_env` "
    "(default DRIFT_MONITOR_API_TOKEN).",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


async def require_read(request: Request, web: Web, _credentials: Bearer = None) -> None:
    """Reads are open when no token is configured, and need the bearer token when one is."""
    if web.token is not None and not web.bearer_ok(request):
        raise HTTPException(401, BEARER_REQUIRED, {"WWW-Authenticate": "Bearer"})


def no_token_message(web: WebContext) -> str:
    return f"no API token configured: set the environment variable {web.token_env} to allow changes"


async def require_write(request: Request, web: Web, _credentials: Bearer = None) -> None:
    """Changes always need the token: with none configured, nobody may change anything over HTTP."""
    if web.token is None:
        raise HTTPException(403, no_token_message(web))
    if not web.bearer_ok(request):
        raise HTTPException(401, BEARER_REQUIRED, {"WWW-Authenticate": "Bearer"})


def signed_in(web: WebContext, request: Request) -> bool:
    """A person on the dashboard: the bearer token, or an unexpired sign-in cookie signed with a key
    from the token. Nobody is signed in while no token is configured."""
    if web.token is None:
        return False
    if web.bearer_ok(request):
        return True
    return session_cookie_valid(web, request.cookies.get(SESSION_COOKIE, ""), time.time())


class LoginRequired(Exception):
    """A page was asked for without a sign-in while a token is configured: redirect to /login."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


async def require_viewer(request: Request, web: Web) -> None:
    """Pages are open without a token; with one, they need a sign-in (cookie) or the bearer token."""
    if web.token is not None and not signed_in(web, request):
        query = request.url.query
        raise LoginRequired(request.url.path + (f"?{query}" if query else ""))


async def require_editor(request: Request, web: Web) -> None:
    """Changes from the dashboard need a configured token and a signed-in person."""
    if web.token is None:
        raise HTTPException(403, no_token_message(web))
    if not signed_in(web, request):
        raise HTTPException(403, "sign in to acknowledge alerts")


# --- resources or 404 ------------------------------------------------------------------------


class ToolNameConvertor(Convertor[str]):
    """A path parameter of any characters: `:path`'s `.*` stops at a newline, so a tool named with one
    (a server chose it) would have no page. Used as `{tool:toolname}`."""

    regex = "[\\s\\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("toolname", ToolNameConvertor())


def _no_server(name: str) -> HTTPException:
    return HTTPException(404, f"no server named {make_visible(name)!r}")


def find_server_or_404(session: Session, name: str) -> ServerRecord:
    """The server named `name`; a name no server can have (NUL, lone surrogates) is simply not found."""
    server = queries.find_server(session, name) if storable(name) and len(name) <= 200 else None
    if server is None:
        raise _no_server(name)
    return server


def server_id_or_404(session: Session, name: str) -> int:
    """Just the id, for filters by server: one indexed statement."""
    server_id = queries.server_id(session, name) if storable(name) else None
    if server_id is None:
        raise _no_server(name)
    return server_id


ServerName = Annotated[str, Path(description="The server's name", max_length=200, pattern=SERVER_NAME)]


def server_or_404(name: ServerName, session: ReadSession) -> ServerRecord:
    """The server of the API's `{name}` (its OpenAPI document states the name's pattern)."""
    return find_server_or_404(session, name)


def page_server_or_404(name: str, session: ReadSession) -> ServerRecord:
    """The server of a page's `{name}`: any text, so a name that cannot exist is a 404 page."""
    return find_server_or_404(session, name)


AlertId = Annotated[int, Path(ge=1, le=INT32_MAX)]


def alert_or_404(alert_id: AlertId, session: ReadSession) -> AlertRecord:
    alert = queries.find_alert(session, alert_id)
    if alert is None:
        raise HTTPException(404, f"no alert {alert_id}")
    return alert
