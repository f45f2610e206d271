"""/api/v1/sessions: hosts and gateways report their sessions and the listing each cached."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response
from sqlalchemy.orm import Session

from monitor.core.ijson import storable
from monitor.core.text import make_visible
from monitor.identity.callers import may_read, may_report
from monitor.sessions import service as host_sessions
from monitor.sessions.bodies import SessionCreate, SessionHeartbeat
from monitor.store.records import SessionRecord
from monitor.web.context import WebContext
from monitor.web.deps import ReadSession, Web, WriteSession
from monitor.web.schemas import (
    ERRORS,
    NO_NUL,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    ErrorOut,
    Limit,
    Page,
    not_found,
    utc,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["sessions"],
    responses=ERRORS,  # each route says who may use it: hosts report with a decide token
    default_response_class=ApiJSONResponse,
)
ServerPath = Annotated[str, Path(max_length=200, pattern=SERVER_NAME)]
SessionPath = Annotated[
    str, Path(max_length=200, pattern=NO_NUL, description="The host's session id (URL-encoded)")
]


def _no_session(server: str, session_id: str, hint: str = "") -> HTTPException:
    return HTTPException(404, f"no session {make_visible(session_id)!r} on server {server!r}{hint}")


def _reported(session: Session, web: WebContext, server: str, session_id: str) -> SessionRecord:
    """The session as listed, stale or not, read back in the transaction that just changed it."""
    for record in host_sessions.list_sessions(
        session, stale_only=False, now=web.now(), grace=web.session_grace
    ):
        if record.server == server and record.session_id == session_id:
            return record
    raise _no_session(server, session_id)


@router.post(
    "/sessions",
    status_code=201,
    summary="Report a host session and the listing it cached",
    dependencies=[Depends(may_report)],
    responses={**WRITE_ERRORS, **not_found("server")},
)
def register_session(web: Web, body: SessionCreate, session: WriteSession) -> SessionRecord:
    connected_at = utc(body.connected_at, ["body", "connected_at"])
    try:
        host_sessions.register_session(
            session,
            server=body.server,
            session_id=body.session_id,
            client=body.client,
            client_capabilities=body.client_capabilities,
            connected_at=connected_at,
            fingerprint=body.fingerprint,
            tools=body.tools,
            now=web.now(),
        )
    except host_sessions.UnknownServer as exc:
        raise HTTPException(404, str(exc)) from None
    except host_sessions.SessionError as exc:
        raise HTTPException(422, make_visible(str(exc))) from None
    return _reported(session, web, body.server, body.session_id)


@router.put(
    "/sessions/{server}/{session_id:path}",
    summary="Heartbeat, optionally with the fingerprint of a re-fetched listing",
    dependencies=[Depends(may_report)],
    responses={**WRITE_ERRORS, **not_found("server or session")},
)
def heartbeat_session(
    web: Web,
    server: ServerPath,
    session_id: SessionPath,
    session: WriteSession,
    body: SessionHeartbeat | None = None,
) -> SessionRecord:
    report = body or SessionHeartbeat()
    if not storable(session_id):
        raise _no_session(server, session_id)
    try:
        host = host_sessions.heartbeat(
            session,
            server=server,
            session_id=session_id,
            fingerprint=report.fingerprint,
            tools=report.tools,
            now=web.now(),
        )
    except host_sessions.UnknownServer as exc:
        raise HTTPException(404, str(exc)) from None
    except host_sessions.SessionError as exc:
        raise HTTPException(422, make_visible(str(exc))) from None
    if host is None:
        raise _no_session(server, session_id, ": POST /sessions first")
    return _reported(session, web, server, session_id)


@router.delete(
    "/sessions/{server}/{session_id:path}",
    status_code=204,
    summary="The host closed the session",
    dependencies=[Depends(may_report)],
    responses={**WRITE_ERRORS, **not_found("server or session")},
)
def close_session(web: Web, server: ServerPath, session_id: SessionPath, session: WriteSession) -> Response:
    try:
        closed = storable(session_id) and host_sessions.close_session(
            session, server=server, session_id=session_id, now=web.now(), policy=web.alerting
        )
    except host_sessions.UnknownServer as exc:
        raise HTTPException(404, str(exc)) from None
    if not closed:
        raise _no_session(server, session_id)
    return Response(status_code=204)


@router.get(
    "/sessions",
    summary="Reported host sessions, stale ones first",
    dependencies=[Depends(may_read)],
    responses={404: {"model": ErrorOut, "description": "`before` names no session in this list"}},
)
def list_sessions(
    web: Web,
    session: ReadSession,
    stale: Annotated[bool, Query(description="Only sessions holding an outdated listing")] = False,
    limit: Limit = 100,
    before: Annotated[
        str | None, Query(max_length=401, description="`next_before` of the previous page")
    ] = None,
) -> Page[SessionRecord, str]:
    """`next_before` is `server/session_id` of the last item."""
    records = host_sessions.list_sessions(session, stale_only=stale, now=web.now(), grace=web.session_grace)
    start = 0
    if before is not None:
        keys = [f"{r.server}/{r.session_id}" for r in records]
        if before not in keys:
            raise HTTPException(404, "before: no such session in this list (start again without before)")
        start = keys.index(before) + 1
    return Page.of(records[start : start + limit + 1], limit, lambda r: f"{r.server}/{r.session_id}")
