"""The JSON API under /api/v1 (SPEC section 8), its bearer-token auth and the Prometheus metrics.

The API reads storage through `monitor.store.queries`; writes go through the Store's session factory
or the modules that own them (`monitor.notify.sessions`, `monitor.notify.alerts`). Headers of servers and
webhook secrets are never part of any response model, so no endpoint can return them.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)
from sqlalchemy import select, text
from sqlalchemy.exc import SQLAlchemyError

from monitor.collect.client import resolved_addresses
from monitor.config import Config, ServerConfig
from monitor.core.hosts import REFUSED_NAMES
from monitor.core.rules import Finding, Severity
from monitor.core.text import make_visible
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store, queries
from monitor.store.models import Server

PollNow = Callable[[str], Awaitable[PollOutcome]]
INT32_MAX = 2_147_483_647
"""Ids and versions are 32-bit integers in PostgreSQL; larger cursors cannot name a row."""
SERVER_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
FINGERPRINT = r"^[0-9a-f]{64}$"
NO_NUL = r"^[^\x00]*$"
"""Free text that goes into the database: PostgreSQL refuses NUL characters in text."""
METRICS_WINDOW = timedelta(hours=1)


class ApiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: listings may carry lone surrogates that UTF-8 cannot encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


# --- the app's shared state and auth ---------------------------------------------------------


@dataclass
class WebContext:
    """Everything a request handler needs, kept on `app.state.web`."""

    store: Store
    config: Config
    token: str | None
    poll_now: PollNow | None
    clock: Callable[[], datetime]
    alerting: Alerting
    """The alert policy session closes resolve alerts with (the service's, so its deliverer is woken)."""

    @property
    def token_env(self) -> str:
        return self.config.monitor.api_token_env

    def bearer_ok(self, request: Request) -> bool:
        """A constant-time comparison of the request's bearer token with the configured one."""
        if self.token is None:
            return False
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        return hmac.compare_digest(given.strip().encode("utf-8", "surrogatepass"), self.token.encode("utf-8"))

    def now(self) -> datetime:
        return self.clock()

    @property
    def session_grace(self) -> timedelta:
        return timedelta(seconds=self.config.monitor.session_grace)


BEARER_REQUIRED = "missing or wrong bearer token (Authorization: Bearer <token>)"
PUBLIC_PATHS = frozenset({"/healthz", "/api/v1/healthz"})
"""The only API paths that answer without the token (liveness, for load balancers)."""


def is_api_path(path: str) -> bool:
    return path.startswith("/api/") or path in ("/healthz", "/metrics")


def context(request: Request) -> WebContext:
    web: WebContext = request.app.state.web
    return web


bearer_scheme = HTTPBearer(
    auto_error=False,
    description="The token from the environment variable named by `api_token_env` "
    "(default DRIFT_MONITOR_API_TOKEN).",
)


def require_read(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)] = None,
) -> None:
    """Reads are open when no token is configured, and need the bearer token when one is."""
    web = context(request)
    if web.token is not None and not web.bearer_ok(request):
        raise HTTPException(
            401,
            BEARER_REQUIRED,
            {"WWW-Authenticate": "Bearer"},
        )


def require_write(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)] = None,
) -> None:
    """Changes always need the token: with none configured, nobody may change anything over HTTP."""
    web = context(request)
    if web.token is None:
        raise HTTPException(
            403, f"no API token configured: set the environment variable {web.token_env} to allow changes"
        )
    if not web.bearer_ok(request):
        raise HTTPException(
            401,
            BEARER_REQUIRED,
            {"WWW-Authenticate": "Bearer"},
        )


# --- response models -------------------------------------------------------------------------


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    """Every error answer: `detail` says what was wrong; `errors` lists each invalid field (422)."""

    detail: str
    errors: list[ErrorItem] | None = None


ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "A token is configured and the request did not carry it"},
    422: {"model": ErrorOut, "description": "A parameter or the body is invalid; `errors` says which"},
}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    403: {"model": ErrorOut, "description": "No API token is configured, so changes are refused"},
}


def _not_found(what: str) -> dict[int | str, dict[str, Any]]:
    return {404: {"model": ErrorOut, "description": f"No such {what}"}}


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class SnapshotSummary(_Out):
    version: int = Field(description="1 for the first listing seen, +1 for each different one after it")
    fingerprint: str = Field(description="SHA-256 of the canonical listing (SPEC section 2)")
    first_seen: datetime
    last_seen: datetime
    poll_count: int = Field(description="Successful polls that saw this listing")
    tool_count: int
    protocol_version: str | None


class SnapshotOut(SnapshotSummary):
    server: str
    server_info: dict[str, Any] | None
    tools: list[dict[str, Any]] = Field(description="The tools as the server sent them, `_meta` included")


class ServerOut(_Out):
    name: str
    transport: Literal["http", "sse", "stdio"]
    url: str | None = Field(description="With any password in the URL replaced by ***")
    command: str | None
    origin: Literal["config", "api"]
    created_at: datetime
    status: Literal["ok", "failing", "never polled"]
    last_poll_at: datetime | None
    last_success_at: datetime | None
    consecutive_failures: int
    last_error: str | None
    protocol_version: str | None
    server_info: dict[str, Any] | None
    capabilities: dict[str, Any] | None
    list_changed_advertised: bool | None
    watching_since: datetime | None = Field(
        description="Since when the monitor's long-lived watch session to the server has been up"
    )
    last_notification_at: datetime | None = Field(description="The last tools list-changed notification")
    era: str
    interval_seconds: float | None
    has_headers: bool = Field(
        description="Whether request headers are stored; their values are never returned"
    )
    current: SnapshotSummary | None
    open_alerts: dict[str, int] = Field(description="Open alerts by severity")


class ServerList(BaseModel):
    items: list[ServerOut]
    next_before: str | None = Field(description="Pass as `before` for the next page; null on the last")


class SnapshotList(BaseModel):
    items: list[SnapshotSummary]
    next_before: int | None


def _refuse_stdio(value: Any) -> Any:
    if value == "stdio":
        raise ValueError("stdio servers are registered only from config files")
    return value


_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
URL_PATTERN = (
    rf"^https?://([A-Za-z0-9._~%!$&'()*+,;=:-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*(:{_PORT})?([/?#][!-~]*)?$"
)
"""An http(s) URL of printable ASCII with a host: what the poller can reach and the database can store."""


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


_REFUSED_HOSTS = "|".join(
    (
        r"([0-9a-fA-FxX]*\.)*0[xX][0-9a-fA-F]*(\.[0-9a-fA-FxX]*)*",  # hexadecimal parts
        r"[0-9]+(\.[0-9]+){0,2}\.?",  # fewer than four parts (2852039166)
        r"[0-9]+(\.[0-9]+){4,}\.?",
        r"([0-9]+\.)*0[0-9]+(\.[0-9]+)*\.?",  # octal parts
        r"0+\.[0-9.]*",  # 0.0.0.0/8
        r"169\.254\.[0-9]+\.[0-9]+\.?",  # link-local, cloud metadata
        r"100\.100\.100\.200\.?",
        r"(22[4-9]|2[3-9][0-9]|[3-9][0-9]{2}|[0-9]{4,})\.[0-9.]*",  # multicast, reserved
        *(_any_case(name) + r"\.?" for name in sorted(REFUSED_NAMES)),
    )
)
REFUSED_URL_PATTERN = rf"^https?://([^/?#@]*@)?({_REFUSED_HOSTS})([:/?#]|$)"
"""URLs whose host the default `allowed_server_hosts` refuses (and IPv4 addresses not written as four
decimal numbers), for the OpenAPI schema: so that every URL the schema allows is one the API accepts
unless an allow-list is configured. `HostPolicy` is what enforces it."""
PATTERN_MESSAGES = {
    "url": "must be an http:// or https:// URL of printable ASCII with a host (and a port up to 65535)",
    "name": "must start with a letter or digit and hold only letters, digits, '.', '_' and '-'",
    "server": "must start with a letter or digit and hold only letters, digits, '.', '_' and '-'",
    "fingerprint": "must be 64 lowercase hex characters (a SHA-256)",
    "session_id": "must not contain NUL characters",
    "client": "must not contain NUL characters",
    "headers": "header names must be HTTP tokens and values printable ASCII",
}
"""Plain words for pattern mismatches, by field name: the regex alone tells a person little."""
HeaderName = Annotated[str, StringConstraints(pattern=r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,200}$")]
HeaderValue = Annotated[str, StringConstraints(pattern=r"^[\t\x20-\x7e]{0,8192}$")]


class ServerCreate(BaseModel):
    """A server to watch. Only http and sse: stdio servers run commands, so only config files add them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME)
    transport: Annotated[Literal["http", "sse"], BeforeValidator(_refuse_stdio)] = Field(
        default="http", description="`stdio` is refused: stdio servers are registered only from config files"
    )
    url: str = Field(
        min_length=1,
        max_length=2048,
        pattern=URL_PATTERN,
        description="Its host must pass `[monitor] allowed_server_hosts` (`not`: what the default refuses)",
        json_schema_extra={"not": {"pattern": REFUSED_URL_PATTERN}},
    )
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict,
        description="Sent with every poll (e.g. Authorization); stored, never returned",
        json_schema_extra={"additionalProperties": False},
    )
    interval_seconds: float | None = Field(default=None, gt=0, le=86400 * 365)
    era: Literal["handshake", "modern"] = "handshake"


class AtOut(BaseModel):
    server: str
    time: datetime = Field(description="The instant asked about, in UTC")
    snapshot: SnapshotSummary
    in_force_since: datetime = Field(description="When this version was first seen")
    last_confirmed: datetime = Field(description="The last poll that saw this version")
    superseded_at: datetime | None = Field(description="When the next version was first seen; null if none")
    certain: bool = Field(
        description="True when a poll at or after `time` still saw this version; false when `time` is "
        "after its last poll, so another listing may already have been served"
    )


class FindingOut(_Out):
    rule: str
    severity: Severity
    tool: str | None
    field: str | None
    old: Any
    new: Any
    message: str
    detail: Any


class ChangeOut(FindingOut):
    id: int
    server: str
    detected_at: datetime
    from_version: int | None = Field(description="The version changed from; null for server findings")
    to_version: int | None


class ChangeList(BaseModel):
    items: list[ChangeOut]
    next_before: int | None


class ToolVersionOut(BaseModel):
    from_version: int = Field(description="First server version with this definition")
    to_version: int = Field(description="Last server version with this definition")
    first_seen: datetime
    last_seen: datetime
    present: bool = Field(description="False for a run of versions in which the tool was absent")
    fingerprint: str | None = Field(description="SHA-256 of the tool's canonical JSON")
    definition: dict[str, Any] | None
    findings: list[ChangeOut] = Field(description="What changed at the step into this version")


class ToolHistory(BaseModel):
    server: str
    tool: str
    items: list[ToolVersionOut] = Field(description="Newest first")
    next_before: int | None = Field(description="A `from_version`: pass as `before` for older versions")


class PollOut(BaseModel):
    server: str
    ok: bool
    tool_count: int
    fingerprint: str | None
    version: int | None
    new_version: bool
    worst: Severity | None
    findings: list[FindingOut]
    error_kind: str | None
    error: str | None


class AlertOut(_Out):
    id: int
    server: str
    rule: str
    severity: Severity
    tool: str | None
    session_id: str | None
    state: Literal["open", "acknowledged", "resolved"]
    message: str
    opened_at: datetime
    last_seen_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    finding_count: int


class AlertList(BaseModel):
    items: list[AlertOut]
    next_before: int | None


TOOLS_SCHEMA: dict[str, Any] = {
    "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    "description": "The tools the host cached, as the server sent them (names unique); the monitor "
    "fingerprints them",
}


def _one_report(fingerprint: str | None, tools: list[dict[str, Any]] | None, *, required: bool) -> None:
    if fingerprint is not None and tools is not None:
        raise ValueError("give either fingerprint or tools, not both")
    if required and fingerprint is None and tools is None:
        raise ValueError("a session report needs a fingerprint or the tools it cached")


class SessionCreate(BaseModel):
    """A host or gateway reports a session and the listing it cached: its fingerprint or the tools."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["fingerprint"], "properties": {"fingerprint": {"type": "string"}}},
                {"required": ["tools"], "properties": {"tools": {"type": "array"}}},
            ]
        },
    )

    server: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME)
    session_id: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    client: str | None = Field(default=None, max_length=500, pattern=NO_NUL)
    connected_at: AwareDatetime
    fingerprint: str | None = Field(default=None, pattern=FINGERPRINT)
    tools: list[dict[str, Any]] | None = Field(
        default=None, max_length=100_000, json_schema_extra=TOOLS_SCHEMA
    )

    @model_validator(mode="after")
    def _fingerprint_or_tools(self) -> SessionCreate:
        _one_report(self.fingerprint, self.tools, required=True)
        return self


class SessionHeartbeat(BaseModel):
    """A heartbeat; with a fingerprint or the tools when the host re-fetched the listing."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {
                "required": ["fingerprint", "tools"],
                "properties": {"fingerprint": {"type": "string"}, "tools": {"type": "array"}},
            }
        },
    )

    fingerprint: str | None = Field(default=None, pattern=FINGERPRINT)
    tools: list[dict[str, Any]] | None = Field(
        default=None, max_length=100_000, json_schema_extra=TOOLS_SCHEMA
    )

    @model_validator(mode="after")
    def _not_both(self) -> SessionHeartbeat:
        _one_report(self.fingerprint, self.tools, required=False)
        return self


class SessionOut(_Out):
    server: str
    session_id: str
    client: str | None
    connected_at: datetime
    last_heartbeat_at: datetime
    fingerprint: str
    current_fingerprint: str | None
    stale: bool
    stale_since: datetime | None


class SessionList(BaseModel):
    items: list[SessionOut]
    next_before: str | None = Field(description="`server/session_id` of the last item: pass as `before`")


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None


# --- helpers ---------------------------------------------------------------------------------


def _db_safe(value: str) -> bool:
    """Text both databases can bind: no NUL (PostgreSQL refuses it) and no lone surrogates."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unprocessable(loc: Sequence[str | int], message: str) -> HTTPException:
    return HTTPException(422, f"{'.'.join(str(p) for p in loc)}: {message}")


def _utc(value: datetime, loc: Sequence[str | int]) -> datetime:
    """The instant in UTC; an offset that pushes it outside the representable years is a 422."""
    try:
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise _unprocessable(loc, "the instant is outside the representable years 1-9999") from None


def _server_id(web: WebContext, name: str) -> int:
    server_id = None
    if _db_safe(name):
        with web.store.sessions() as session:
            server_id = queries.server_id(session, name)
    if server_id is None:
        raise HTTPException(404, f"no server named {make_visible(name)!r}")
    return server_id


def _finding(finding: Finding) -> FindingOut:
    return FindingOut(
        rule=finding.rule,
        severity=finding.severity,
        tool=finding.tool,
        field=finding.field,
        old=finding.old,
        new=finding.new,
        message=finding.message,
        detail=finding.detail,
    )


def _server_out(row: queries.ServerRow) -> ServerOut:
    return ServerOut.model_validate(row)


ServerName = Annotated[str, Path(description="The server's name", max_length=200, pattern=SERVER_NAME)]
Limit = Annotated[int, Query(ge=1, le=500, description="Items per page")]
IntCursor = Annotated[
    int | None,
    Query(ge=0, le=INT32_MAX, description="`next_before` of the previous page: continue after it"),
]

Web = Annotated[WebContext, Depends(context)]

router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(require_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
public = APIRouter(default_response_class=ApiJSONResponse)
"""Endpoints outside the token check: only /healthz."""
metrics_router = APIRouter(dependencies=[Depends(require_read)], responses=ERRORS)


# --- servers ---------------------------------------------------------------------------------


@router.get("/servers", response_model=ServerList, tags=["servers"], summary="List servers by name")
def list_servers(
    web: Web,
    limit: Limit = 100,
    before: Annotated[
        str | None,
        Query(
            max_length=200,
            pattern=SERVER_NAME,
            description="`next_before` of the previous page (a server name)",
        ),
    ] = None,
) -> ServerList:
    if before is not None and not _db_safe(before):
        raise _unprocessable(["query", "before"], "not a server name")
    with web.store.sessions() as session:
        rows = queries.servers(session, limit=limit + 1, after=before)
    more = len(rows) > limit
    rows = rows[:limit]
    return ServerList(items=[_server_out(r) for r in rows], next_before=rows[-1].name if more else None)


@router.post(
    "/servers",
    response_model=ServerOut,
    status_code=201,
    tags=["servers"],
    summary="Register an http or sse server",
    description="The URL's host must pass `[monitor] allowed_server_hosts` (by default: anything but "
    "link-local, cloud metadata and reserved addresses), or the answer is 422; every connection "
    "the poller makes to it is checked again.",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, 409: {"model": ErrorOut, "description": "The name is taken"}},
)
def create_server(web: Web, body: ServerCreate, response: Response) -> ServerOut:
    try:
        ServerConfig(
            name=body.name, transport=body.transport, url=body.url, headers=body.headers, era=body.era
        )
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors(include_input=False, include_url=False))
        raise HTTPException(422, problems) from None
    # SSRF: checked again at connect
    refusal = web.config.monitor.host_policy.url_refusal(body.url, resolved_addresses)
    if refusal is not None:
        raise HTTPException(422, f"body.url: {refusal}")
    now = web.now()
    with web.store.sessions.begin() as session:
        if session.scalar(select(Server.id).where(Server.name == body.name)) is not None:
            raise HTTPException(409, f"a server named {body.name!r} is already registered")
        session.add(
            Server(
                name=body.name,
                transport=body.transport,
                url=body.url,
                origin="api",
                created_at=now,
                consecutive_failures=0,
                headers=dict(body.headers) or None,
                interval_seconds=body.interval_seconds,
                era=body.era,
                next_poll_at=now,
            )
        )
    with web.store.sessions() as session:
        row = queries.server(session, body.name)
    assert row is not None
    response.headers["Location"] = f"/api/v1/servers/{body.name}"
    return _server_out(row)


@router.get("/servers/{name}", response_model=ServerOut, tags=["servers"], responses=_not_found("server"))
def get_server(web: Web, name: ServerName) -> ServerOut:
    with web.store.sessions() as session:
        row = queries.server(session, name)
    if row is None:
        raise HTTPException(404, f"no server named {name!r}")
    return _server_out(row)


@router.delete(
    "/servers/{name}",
    status_code=204,
    tags=["servers"],
    summary="Forget a server registered over the API, with its whole history",
    description="Only servers registered over the API can be deleted; a config-file server would be "
    "registered again at the next sync, so it is removed from the config file instead (409).",
    dependencies=[Depends(require_write)],
    responses={
        **WRITE_ERRORS,
        **_not_found("server"),
        409: {"model": ErrorOut, "description": "The server comes from the config file"},
    },
)
def delete_server(web: Web, name: ServerName) -> Response:
    with web.store.sessions.begin() as session:
        server = session.scalar(select(Server).where(Server.name == name))
        if server is None:
            raise HTTPException(404, f"no server named {name!r}")
        if server.origin != "api":
            raise HTTPException(
                409,
                f"server {name!r} comes from the config file: remove it there "
                "(it would be registered again at the next sync)",
            )
        session.delete(server)
    return Response(status_code=204)


@router.post(
    "/servers/{name}/poll",
    response_model=PollOut,
    tags=["servers"],
    summary="Poll the server now and store the result",
    dependencies=[Depends(require_write)],
    responses={
        **WRITE_ERRORS,
        **_not_found("server"),
        503: {"model": ErrorOut, "description": "This process cannot poll"},
    },
)
async def poll_server(web: Web, name: ServerName) -> PollOut:
    if web.poll_now is None:
        raise HTTPException(
            503,
            "polling on request is not available in this process (run the app with `drift-monitor serve`)",
        )
    with web.store.sessions() as session:
        if queries.server_id(session, name) is None:
            raise HTTPException(404, f"no server named {name!r}")
    try:
        outcome = await web.poll_now(name)
    except LookupError:
        raise HTTPException(404, f"server {name!r} is not known to this process's poller") from None
    return PollOut(
        server=outcome.server,
        ok=outcome.ok,
        tool_count=outcome.tool_count,
        fingerprint=outcome.fingerprint,
        version=outcome.version,
        new_version=outcome.new_version,
        worst=outcome.worst,
        findings=[_finding(f) for f in outcome.findings],
        error_kind=outcome.error_kind,
        error=outcome.error,
    )


# --- snapshots -------------------------------------------------------------------------------


@router.get(
    "/servers/{name}/snapshots",
    response_model=SnapshotList,
    tags=["snapshots"],
    summary="Versions of the server's listing, newest first",
    responses=_not_found("server"),
)
def list_snapshots(web: Web, name: ServerName, limit: Limit = 100, before: IntCursor = None) -> SnapshotList:
    server_id = _server_id(web, name)
    with web.store.sessions() as session:
        rows = queries.snapshots(session, server_id, limit=limit + 1, before=before)
    more = len(rows) > limit
    rows = rows[:limit]
    return SnapshotList(
        items=[SnapshotSummary.model_validate(r) for r in rows],
        next_before=rows[-1].version if more else None,
    )


@router.get(
    "/servers/{name}/snapshots/{version}",
    response_model=SnapshotOut,
    tags=["snapshots"],
    summary="One version with its full listing",
    responses=_not_found("server or version"),
)
def get_snapshot(
    web: Web, name: ServerName, version: Annotated[int, Path(ge=1, le=INT32_MAX)]
) -> SnapshotOut:
    server_id = _server_id(web, name)
    with web.store.sessions() as session:
        row = queries.snapshot(session, server_id, version)
        if row is None:
            raise HTTPException(404, f"server {name!r} has no version {version}")
        tools = queries.listing_tools(session, row.listing_id)
    return SnapshotOut(
        **SnapshotSummary.model_validate(row).model_dump(),
        server=name,
        server_info=row.server_info,
        tools=tools,
    )


@router.get(
    "/servers/{name}/at",
    response_model=AtOut,
    tags=["snapshots"],
    summary="The version in force at an instant (incident review)",
    responses=_not_found("server, or no version at or before that time"),
)
def snapshot_at(
    web: Web,
    name: ServerName,
    time: Annotated[AwareDatetime, Query(description="ISO 8601 with an offset, e.g. 2026-03-01T12:00:00Z")],
) -> AtOut:
    at = _utc(time, ["query", "time"])
    with web.store.sessions() as session:
        found = queries.snapshot_at(session, name, at)
        if found is None:
            server_id = queries.server_id(session, name)
            if server_id is None:
                raise HTTPException(404, f"no server named {name!r}")
            first = queries.first_snapshot_time(session, server_id)
            since = (
                f"; its first version was seen at {first.isoformat()}" if first else "; it has no version yet"
            )
            raise HTTPException(404, f"server {name!r} had no listing at {at.isoformat()}{since}")
    snap = found.snapshot
    return AtOut(
        server=name,
        time=at,
        snapshot=SnapshotSummary.model_validate(snap),
        in_force_since=snap.first_seen,
        last_confirmed=snap.last_seen,
        superseded_at=found.superseded_at,
        certain=at <= snap.last_seen,
    )


def _change(row: queries.ChangeRow) -> ChangeOut:
    return ChangeOut.model_validate(row)


@router.get(
    "/servers/{name}/tools/{tool:path}/history",
    response_model=ToolHistory,
    tags=["snapshots"],
    summary="Each definition one tool had, newest first, with what changed at each step",
    responses=_not_found("server or tool"),
)
def tool_history(
    web: Web,
    name: ServerName,
    tool: Annotated[str, Path(description="The tool's name (URL-encoded)")],
    limit: Limit = 100,
    before: IntCursor = None,
) -> ToolHistory:
    server_id = _server_id(web, name)
    runs: list[queries.ToolVersion] = []
    if _db_safe(tool):
        with web.store.sessions() as session:
            runs = queries.tool_history(session, server_id, tool)
    if not runs:
        raise HTTPException(404, f"server {name!r} never listed a tool named {make_visible(tool)!r}")
    newest_first = [r for r in reversed(runs) if before is None or r.from_version < before]
    page = newest_first[:limit]
    return ToolHistory(
        server=name,
        tool=tool,
        items=[
            ToolVersionOut(
                from_version=r.from_version,
                to_version=r.to_version,
                first_seen=r.first_seen,
                last_seen=r.last_seen,
                present=r.present,
                fingerprint=r.fingerprint,
                definition=r.definition,
                findings=[_change(c) for c in r.findings],
            )
            for r in page
        ],
        next_before=page[-1].from_version if len(newest_first) > limit else None,
    )


# --- changes and alerts ----------------------------------------------------------------------


@router.get(
    "/changes",
    response_model=ChangeList,
    tags=["changes"],
    summary="Findings across servers, newest first",
    responses=_not_found("server"),
)
def list_changes(
    web: Web,
    server: Annotated[str | None, Query(max_length=200, pattern=SERVER_NAME)] = None,
    min_severity: Severity | None = None,
    since: Annotated[AwareDatetime | None, Query(description="Detected at or after (inclusive)")] = None,
    until: Annotated[AwareDatetime | None, Query(description="Detected before (exclusive)")] = None,
    limit: Limit = 100,
    before: IntCursor = None,
) -> ChangeList:
    server_id = _server_id(web, server) if server is not None else None
    start = _utc(since, ["query", "since"]) if since else None
    end = _utc(until, ["query", "until"]) if until else None
    with web.store.sessions() as session:
        rows = queries.changes(
            session,
            server_id=server_id,
            min_severity=min_severity,
            since=start,
            until=end,
            limit=limit + 1,
            before=before,
        )
    more = len(rows) > limit
    rows = rows[:limit]
    return ChangeList(items=[_change(r) for r in rows], next_before=rows[-1].id if more else None)


@router.get(
    "/alerts",
    response_model=AlertList,
    tags=["alerts"],
    summary="Alerts newest first",
    responses=_not_found("server"),
)
def list_alerts(
    web: Web,
    state: Literal["open", "acknowledged", "resolved"] | None = None,
    server: Annotated[str | None, Query(max_length=200, pattern=SERVER_NAME)] = None,
    min_severity: Severity | None = None,
    limit: Limit = 100,
    before: IntCursor = None,
) -> AlertList:
    server_id = _server_id(web, server) if server is not None else None
    with web.store.sessions() as session:
        rows = queries.alerts(
            session,
            state=state,
            server_id=server_id,
            min_severity=min_severity,
            limit=limit + 1,
            before=before,
        )
    more = len(rows) > limit
    rows = rows[:limit]
    return AlertList(
        items=[AlertOut.model_validate(r) for r in rows], next_before=rows[-1].id if more else None
    )


AlertId = Annotated[int, Path(ge=1, le=INT32_MAX)]


def acknowledge_alert(web: WebContext, alert_id: int) -> queries.AlertRow | None:
    """Acknowledge through `monitor.notify.alerts` (which owns alert state); None: no such alert."""
    from monitor.notify import alerts

    with web.store.sessions.begin() as session:
        if alerts.acknowledge(session, alert_id, web.now()) is None:
            return None
    with web.store.sessions() as session:
        return queries.alert(session, alert_id)


@router.post(
    "/alerts/{alert_id}/ack",
    response_model=AlertOut,
    tags=["alerts"],
    summary="Acknowledge an alert",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **_not_found("alert")},
)
def ack_alert(web: Web, alert_id: AlertId) -> AlertOut:
    row = acknowledge_alert(web, alert_id)
    if row is None:
        raise HTTPException(404, f"no alert {alert_id}")
    return AlertOut.model_validate(row)


# --- host sessions ---------------------------------------------------------------------------


def _session_out(web: WebContext, server: str, session_id: str) -> SessionOut:
    from monitor.notify import sessions

    with web.store.sessions() as session:
        for view in sessions.list_sessions(session, stale_only=False, now=web.now(), grace=web.session_grace):
            if view.server == server and view.session_id == session_id:
                return SessionOut.model_validate(view)
    raise HTTPException(404, f"no session {make_visible(session_id)!r} on server {server!r}")


def _check_text(value: str | None, loc: Sequence[str | int]) -> None:
    if value is not None and not _db_safe(value):
        raise _unprocessable(loc, "must not contain NUL characters or lone surrogates")


@router.post(
    "/sessions",
    response_model=SessionOut,
    status_code=201,
    tags=["sessions"],
    summary="Report a host session and the listing it cached",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **_not_found("server")},
)
def register_session(web: Web, body: SessionCreate) -> SessionOut:
    from monitor.notify import sessions

    _check_text(body.session_id, ["body", "session_id"])
    _check_text(body.client, ["body", "client"])
    connected_at = _utc(body.connected_at, ["body", "connected_at"])
    try:
        with web.store.sessions.begin() as session:
            sessions.register_session(
                session,
                server=body.server,
                session_id=body.session_id,
                client=body.client,
                connected_at=connected_at,
                fingerprint=body.fingerprint,
                tools=body.tools,
                now=web.now(),
            )
    except sessions.UnknownServer as exc:
        raise HTTPException(404, str(exc)) from None
    except sessions.SessionError as exc:
        raise HTTPException(422, make_visible(str(exc))) from None
    return _session_out(web, body.server, body.session_id)


SessionPath = Annotated[
    str, Path(max_length=200, pattern=NO_NUL, description="The host's session id (URL-encoded)")
]


@router.put(
    "/sessions/{server}/{session_id:path}",
    response_model=SessionOut,
    tags=["sessions"],
    summary="Heartbeat, optionally with the fingerprint of a re-fetched listing",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **_not_found("server or session")},
)
def heartbeat_session(
    web: Web,
    server: Annotated[str, Path(max_length=200, pattern=SERVER_NAME)],
    session_id: SessionPath,
    body: SessionHeartbeat | None = None,
) -> SessionOut:
    from monitor.notify import sessions

    report = body or SessionHeartbeat()
    if not _db_safe(session_id):
        raise HTTPException(404, f"no session {make_visible(session_id)!r} on server {server!r}")
    try:
        with web.store.sessions.begin() as session:
            host = sessions.heartbeat(
                session,
                server=server,
                session_id=session_id,
                fingerprint=report.fingerprint,
                tools=report.tools,
                now=web.now(),
            )
    except sessions.UnknownServer as exc:
        raise HTTPException(404, str(exc)) from None
    except sessions.SessionError as exc:
        raise HTTPException(422, make_visible(str(exc))) from None
    if host is None:
        raise HTTPException(
            404, f"no session {make_visible(session_id)!r} on server {server!r}: POST /sessions first"
        )
    return _session_out(web, server, session_id)


@router.delete(
    "/sessions/{server}/{session_id:path}",
    status_code=204,
    tags=["sessions"],
    summary="The host closed the session",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **_not_found("server or session")},
)
def close_session(
    web: Web,
    server: Annotated[str, Path(max_length=200, pattern=SERVER_NAME)],
    session_id: SessionPath,
) -> Response:
    from monitor.notify import sessions

    closed = False
    if _db_safe(session_id):
        try:
            with web.store.sessions.begin() as session:
                closed = sessions.close_session(
                    session, server=server, session_id=session_id, now=web.now(), policy=web.alerting
                )
        except sessions.UnknownServer as exc:
            raise HTTPException(404, str(exc)) from None
    if not closed:
        raise HTTPException(404, f"no session {make_visible(session_id)!r} on server {server!r}")
    return Response(status_code=204)


@router.get(
    "/sessions",
    response_model=SessionList,
    tags=["sessions"],
    summary="Reported host sessions, stale ones first",
    responses={404: {"model": ErrorOut, "description": "`before` names no session in this list"}},
)
def list_sessions(
    web: Web,
    stale: Annotated[bool, Query(description="Only sessions holding an outdated listing")] = False,
    limit: Limit = 100,
    before: Annotated[
        str | None, Query(max_length=401, description="`next_before` of the previous page")
    ] = None,
) -> SessionList:
    from monitor.notify import sessions

    with web.store.sessions() as session:
        views = sessions.list_sessions(session, stale_only=stale, now=web.now(), grace=web.session_grace)
    start = 0
    if before is not None:
        keys = [f"{v.server}/{v.session_id}" for v in views]
        if before not in keys:
            raise HTTPException(404, "before: no such session in this list (start again without before)")
        start = keys.index(before) + 1
    page = views[start : start + limit]
    more = start + limit < len(views)
    return SessionList(
        items=[SessionOut.model_validate(v) for v in page],
        next_before=f"{page[-1].server}/{page[-1].session_id}" if more and page else None,
    )


# --- health and metrics ----------------------------------------------------------------------


def _health(web: WebContext) -> Response:
    try:
        with web.store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError:
        body = Health(status="unavailable", detail="the database did not answer")
        return ApiJSONResponse(body.model_dump(), status_code=503)
    return ApiJSONResponse(Health(status="ok").model_dump(exclude_none=True))


HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": Health, "description": "The database answers"},
    503: {"model": Health, "description": "The database does not answer"},
}


@public.get("/healthz", tags=["operations"], responses=HEALTH_RESPONSES, summary="Liveness (no auth)")
def healthz(web: Web) -> Response:
    return _health(web)


@public.get("/api/v1/healthz", tags=["operations"], responses=HEALTH_RESPONSES, include_in_schema=False)
def healthz_v1(web: Web) -> Response:
    return _health(web)


class DatabaseCollector:
    """Reads the counters from the database at scrape time, so every process reports the same totals."""

    BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

    def __init__(self, web: WebContext) -> None:
        self.web = web

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        with self.web.store.sessions() as session:
            data = queries.metrics(session, now=self.web.now(), window=METRICS_WINDOW)
        polls = CounterMetricFamily("drift_monitor_polls", "Polls recorded, by outcome.", labels=["outcome"])
        polls.add_metric(["ok"], data.polls_ok)
        polls.add_metric(["failed"], data.polls_failed)
        failures = CounterMetricFamily("drift_monitor_poll_failures", "Failed polls recorded.")
        failures.add_metric([], data.polls_failed)
        seconds = sorted(d / 1000 for d in data.recent_durations_ms)
        buckets = [(str(b), float(sum(1 for s in seconds if s <= b))) for b in self.BUCKETS_S]
        buckets.append(("+Inf", float(len(seconds))))
        latency = GaugeHistogramMetricFamily(
            "drift_monitor_poll_duration_seconds",
            "Poll latency of the polls started in the last hour (a gauge histogram: old polls leave it).",
            buckets=buckets,
            gsum_value=sum(seconds),
        )
        servers = GaugeMetricFamily(
            "drift_monitor_servers", "Registered servers by status.", labels=["status"]
        )
        for status, count in data.servers_by_status.items():
            servers.add_metric([status.replace(" ", "_")], count)
        alerts = GaugeMetricFamily(
            "drift_monitor_alerts", "Unresolved alerts by state and severity.", labels=["state", "severity"]
        )
        for (state, severity), count in sorted(data.alerts.items()):
            alerts.add_metric([state, severity], count)
        open_alerts = GaugeMetricFamily(
            "drift_monitor_open_alerts", "Open (unacknowledged) alerts by severity.", labels=["severity"]
        )
        for severity in queries.SEVERITIES:
            open_alerts.add_metric([severity], data.alerts[("open", severity)])
        pending = GaugeMetricFamily(
            "drift_monitor_webhook_deliveries_pending", "Webhook deliveries waiting in the outbox."
        )
        pending.add_metric([], data.pending_deliveries)
        age = GaugeMetricFamily(
            "drift_monitor_webhook_oldest_pending_age_seconds",
            "Age of the oldest pending delivery (0 if none).",
        )
        oldest = data.oldest_pending_delivery
        age.add_metric([], max(0.0, (self.web.now() - oldest).total_seconds()) if oldest else 0.0)
        versions = GaugeMetricFamily("drift_monitor_snapshot_versions", "Stored listing versions.")
        versions.add_metric([], data.snapshot_versions)
        return [polls, failures, latency, servers, alerts, open_alerts, pending, age, versions]


def metrics_registry(web: WebContext) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(web))
    return registry


@metrics_router.get(
    "/metrics",
    tags=["operations"],
    summary="Prometheus text format",
    response_class=Response,
    responses={
        200: {
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/openmetrics-text": {"schema": {"type": "string"}},
            },
            "description": "Metrics, in OpenMetrics when the Accept header asks for it",
        }
    },
)
def metrics(request: Request) -> Response:
    """OpenMetrics when the scraper asks for it (Prometheus does), else the classic text format."""
    registry: CollectorRegistry = request.app.state.metrics
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(registry), headers={"content-type": content_type})


@metrics_router.get("/api/v1/metrics", include_in_schema=False, response_class=Response)
def metrics_v1(request: Request) -> Response:
    return metrics(request)
