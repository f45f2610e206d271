"""FastAPI dependencies: the request's context and database session, and resources or 404 (who is
asking, and what they may do, is `monitor.identity.callers`).

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

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request
from sqlalchemy.orm import Session
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import HTTPConnection

from monitor.core.ijson import storable
from monitor.core.text import make_visible
from monitor.store import queries
from monitor.store.records import AlertRecord, ServerRecord
from monitor.web.context import WebContext
from monitor.web.schemas import INT32_MAX, SERVER_NAME


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


def server_or_404(name: ServerName, session: ReadSession, web: Web) -> ServerRecord:
    """The server of the API's `{name}` (its OpenAPI document states the name's pattern)."""
    return web.as_of_now(find_server_or_404(session, name))


def page_server_or_404(name: str, session: ReadSession, web: Web) -> ServerRecord:
    """The server of a page's `{name}`: any text, so a name that cannot exist is a 404 page."""
    return web.as_of_now(find_server_or_404(session, name))


AlertId = Annotated[int, Path(ge=1, le=INT32_MAX)]


def alert_or_404(alert_id: AlertId, session: ReadSession) -> AlertRecord:
    alert = queries.find_alert(session, alert_id)
    if alert is None:
        raise HTTPException(404, f"no alert {alert_id}")
    return alert
