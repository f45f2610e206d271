"""/api/v1/servers: list, register, show, forget and poll servers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel, ValidationError
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from monitor.collect.client import resolved_addresses
from monitor.config import ServerConfig
from monitor.core.ijson import storable
from monitor.core.rules import Severity
from monitor.core.states import ServerOrigin
from monitor.identity.callers import TheCaller, may_administer, may_read, may_respond
from monitor.servers.bodies import AliasesIn, ClientProfileIn, ServerCreate
from monitor.store import queries
from monitor.store.generations import names_changed
from monitor.store.models import Server
from monitor.store.queries.servers import redact_url
from monitor.store.records import FindingFields, ServerRecord
from monitor.web.acts import Acting
from monitor.web.context import PollNow, WebContext
from monitor.web.deps import ReadSession, ServerName, Web, find_server_or_404, server_or_404
from monitor.web.schemas import (
    ERRORS,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    ErrorOut,
    Limit,
    Page,
    not_found,
    unprocessable,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["servers"],
    responses=ERRORS,  # each route says who may use it (monitor.core.roles)
    default_response_class=ApiJSONResponse,
)
TheServer = Annotated[ServerRecord, Depends(server_or_404)]


class PollOut(BaseModel):
    server: str
    ok: bool
    tool_count: int
    fingerprint: str | None
    version: int | None
    new_version: bool
    worst: Severity | None
    findings: list[FindingFields]
    error_kind: str | None
    error: str | None


@router.get("/servers", summary="List servers by name", dependencies=[Depends(may_read)])
def list_servers(
    web: Web,
    session: ReadSession,
    limit: Limit = 100,
    before: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=SERVER_NAME,
            description="`next_before` of the previous page (a server name)",
        ),
    ] = None,
) -> Page[ServerRecord, str]:
    if before is not None and not storable(before):
        raise unprocessable(["query", "before"], "not a server name")
    rows = [web.as_of_now(row) for row in queries.list_servers(session, limit=limit + 1, after=before)]
    return Page.of(rows, limit, lambda server: server.name)


@router.post(
    "/servers",
    status_code=201,
    summary="Register an http or sse server",
    description="The URL's host must pass `[monitor] allowed_server_hosts` (by default: anything but "
    "link-local, cloud metadata and reserved addresses), or the answer is 422; every connection "
    "the poller makes to it is checked again.",
    dependencies=[Depends(may_administer)],
    responses={**WRITE_ERRORS, 409: {"model": ErrorOut, "description": "The name is taken"}},
)
def create_server(web: Web, body: ServerCreate, response: Response, act: Acting) -> ServerRecord:
    session = act.session
    try:
        checked = ServerConfig.model_validate(
            {
                "name": body.name,
                "transport": body.transport,
                "url": body.url,
                "headers": body.headers,
                "era": body.era,
                **({"client": _profiles(body.client)} if body.client is not None else {}),
            }
        )
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors(include_input=False, include_url=False))
        raise HTTPException(422, problems) from None
    # SSRF: checked again at every connect
    refusal = web.config.monitor.host_policy.url_refusal(body.url, resolved_addresses)
    if refusal is not None:
        raise HTTPException(422, f"body.url: {refusal}")
    if queries.server_id(session, body.name) is not None:
        raise HTTPException(409, f"a server named {body.name!r} is already registered")
    _check_aliases(session, web, body.name, body.aliases)
    now = web.now()
    session.add(
        Server(
            name=body.name,
            transport=body.transport,
            url=body.url,
            origin=ServerOrigin.API,
            created_at=now,
            consecutive_failures=0,
            headers=dict(body.headers) or None,
            interval_seconds=body.interval_seconds,
            era=body.era,
            aliases=list(body.aliases) or None,
            approval=body.approval,
            next_poll_at=now,
            client=[profile.model_dump() for profile in checked.client],
        )
    )
    names_changed(session)
    session.flush()
    act.record("server.register", body.name, url=redact_url(body.url), aliases=list(body.aliases))
    response.headers["Location"] = f"/api/v1/servers/{body.name}"
    return find_server_or_404(session, body.name)


@router.get("/servers/{name}", dependencies=[Depends(may_read)], responses=not_found("server"))
def get_server(server: TheServer) -> ServerRecord:
    return server


@router.delete(
    "/servers/{name}",
    status_code=204,
    summary="Forget a server registered over the API, with its whole history",
    description="Only servers registered over the API can be deleted; a config-file server would be "
    "registered again at the next sync, so it is removed from the config file instead (409).",
    dependencies=[Depends(may_administer)],
    responses={
        **WRITE_ERRORS,
        **not_found("server"),
        409: {"model": ErrorOut, "description": "The server comes from the config file"},
    },
)
def delete_server(server: TheServer, act: Acting) -> Response:
    session = act.session
    if server.origin != ServerOrigin.API:
        raise HTTPException(
            409,
            f"server {server.name!r} comes from the config file: remove it there "
            "(it would be registered again at the next sync)",
        )
    session.execute(delete(Server).where(Server.id == server.id))
    names_changed(session)
    act.record("server.delete", server.name)
    return Response(status_code=204)


@router.put(
    "/servers/{name}/aliases",
    summary="Set the other names hosts know the server by",
    description="Claude Code names a tool `mcp__<name>__<tool>` after the server's name in its own "
    "config, ToolHive after its workload: an alias lets the decision point find the server by that "
    "name. Aliases from the config file count as well; a name can belong to one server only.",
    dependencies=[Depends(may_administer)],
    responses={
        **WRITE_ERRORS,
        **not_found("server"),
        409: {"model": ErrorOut, "description": "An alias is already a name or alias of another server"},
    },
)
def set_aliases(server: TheServer, body: AliasesIn, web: Web, act: Acting) -> ServerRecord:
    session = act.session
    _check_aliases(session, web, server.name, body.aliases)
    row = session.get_one(Server, server.id, with_for_update=True)
    row.aliases = list(dict.fromkeys(body.aliases)) or None
    names_changed(session)
    act.record("server.aliases", server.name, aliases=row.aliases or [])
    session.flush()
    return find_server_or_404(session, server.name)


def _check_aliases(session: Session, web: WebContext, name: str, aliases: list[str]) -> None:
    """409 when an alias is another server's name or alias (set over the API or in the config)."""
    taken: dict[str, str] = {}
    for server, others in session.execute(select(Server.name, Server.aliases)):
        for taken_name in (server, *(others or ())):
            taken[str(taken_name)] = server
    for configured in web.config.servers:
        for taken_name in (configured.name, *configured.aliases):
            taken[taken_name] = configured.name
    for server, others in web.config.aliases.items():
        for taken_name in others:
            taken[taken_name] = server
    for alias in aliases:
        owner = taken.get(alias)
        if owner is not None and owner != name:
            raise HTTPException(409, f"{alias!r} is already the name or an alias of server {owner!r}")


def server_to_poll(web: Web, name: ServerName) -> ServerRecord:
    """The server, looked up in a session of its own: the poll that follows may take seconds, and
    holds no database connection meanwhile."""
    with web.store.sessions() as session:
        return find_server_or_404(session, name)


async def poller(web: Web) -> PollNow:
    if web.poll_now is None:
        raise HTTPException(
            503,
            "polling on request is not available in this process (run the app with `drift-monitor serve`)",
        )
    return web.poll_now


@router.post(
    "/servers/{name}/poll",
    summary="Poll the server now and store the result",
    dependencies=[Depends(may_respond)],
    responses={
        **WRITE_ERRORS,
        **not_found("server"),
        503: {"model": ErrorOut, "description": "This process cannot poll"},
    },
)
async def poll_server(
    web: Web,
    caller: TheCaller,
    poll_now: Annotated[PollNow, Depends(poller)],
    server: Annotated[ServerRecord, Depends(server_to_poll)],
) -> PollOut:
    """Async to await the poller, which does its own database work off the loop."""
    try:
        outcome = await poll_now(server.name)
    except LookupError:
        raise HTTPException(404, f"server {server.name!r} is not known to this process's poller") from None
    web.identity.note(caller, "server.poll", server.name, "ok" if outcome.ok else "failed")
    return PollOut(
        server=outcome.server,
        ok=outcome.ok,
        tool_count=outcome.tool_count,
        fingerprint=outcome.fingerprint,
        version=outcome.version,
        new_version=outcome.new_version,
        worst=outcome.worst,
        findings=[FindingFields.model_validate(f) for f in outcome.findings],
        error_kind=outcome.error_kind,
        error=outcome.error,
    )


def _profiles(client: ClientProfileIn | list[ClientProfileIn]) -> list[dict[str, Any]]:
    return [profile.profile() for profile in (client if isinstance(client, list) else [client])]
