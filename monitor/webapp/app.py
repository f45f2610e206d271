"""The web app factory: the JSON API, the dashboard, static files and the headers every response gets.

`drift-monitor serve` builds the Store and runs `create_app(store, config, poll_now=...)` with
uvicorn; tests call it directly. The API token is read once here from the environment variable
named by `config.monitor.api_token_env`. Exception handlers that render a page are sync, so that
Starlette runs them (and their database read) in its threadpool, as FastAPI does handlers.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from anyio import to_thread
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import monitor
from monitor.approvals import api as approvals_api
from monitor.approvals import hooks
from monitor.approvals import pages as approval_pages
from monitor.approvals.lane import THREADS, Admission, DecisionLane
from monitor.approvals.point import DecisionPoint
from monitor.config import Config
from monitor.identity import api as identity_api
from monitor.identity import pages as identity_pages
from monitor.identity.audit import AuditLog
from monitor.identity.callers import (
    BEARER_REQUIRED,
    Authenticate,
    Identity,
    LoginRequired,
    require,
)
from monitor.identity.roles import Permission
from monitor.identity.signin import Signer
from monitor.identity.storage import web_key
from monitor.notify.alerts import Alerting
from monitor.sessions import api as sessions
from monitor.sessions import pages as session_pages
from monitor.silences import api as silences
from monitor.silences import pages as silence_pages
from monitor.store import Store
from monitor.store.db import REQUEST_THREADS
from monitor.webapp.api import (
    alerts,
    changes,
    fingerprint,
    health,
    servers,
    snapshots,
    views,
)
from monitor.webapp.api.schemas import PATTERN_MESSAGES, ApiJSONResponse
from monitor.webapp.api.strict import known_query_only
from monitor.webapp.context import PeerMetrics, PollNow, WebContext
from monitor.webapp.pages import alert as alert_page
from monitor.webapp.pages import alerts as alert_pages
from monitor.webapp.pages import at, overview, refresh, search
from monitor.webapp.pages import servers as server_pages
from monitor.webapp.pages.csrf import FormRefused
from monitor.webapp.pages.rendering import error_page, make_environment

WEB = Path(monitor.__file__).resolve().parent.parent / "web"

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
"""No script at all, no inline style: listings are hostile text, so nothing on a page may run."""

SECURITY_HEADERS = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "same-origin"),
    ("cross-origin-opener-policy", "same-origin"),
    ("permissions-policy", "camera=(), microphone=(), geolocation=()"),
)


class SecurityHeaders:
    """Adds the CSP and friends to every response, error pages and static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    headers[name] = value
                if "cache-control" not in headers:
                    headers["cache-control"] = "public, max-age=3600" if static else "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413, by their Content-Length before reading
    anything, and by counting as they arrive when chunked; the body is never read past the limit.
    Host hooks read theirs themselves (`hooks.HOOK_PATHS`): a host runs the tool when its hook gets
    an error status, so an oversized hook input is answered as a deny instead."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in hooks.HOOK_PATHS:
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        received = 0

        async def limited() -> Message:
            # Raised while the app reads the body, so its own handler answers in the route's format.
            nonlocal received
            if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
                raise StarletteHTTPException(413, f"the request body is over the {self.limit}-byte limit")
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise StarletteHTTPException(413, f"the request body is over the {self.limit}-byte limit")
            return message

        await self.app(scope, limited, send)


PUBLIC_PATHS = frozenset({"/healthz", "/api/v1/healthz"})
"""The only API paths that answer without the token (liveness, for load balancers)."""


def is_api_path(path: str) -> bool:
    return path.startswith("/api/") or path in ("/healthz", "/metrics")


async def _unavailable(scope: Scope, receive: Receive, send: Send) -> None:
    """The 503 a request gets when who it is cannot be checked: the database did not answer."""
    detail = "the database did not answer: try again shortly"
    answer: Response = ApiJSONResponse({"detail": detail}, 503, headers={"Retry-After": "5"})
    if not is_api_path(str(scope.get("path", ""))):
        answer = Response(detail, 503, media_type="text/plain", headers={"Retry-After": "5"})
    await answer(scope, receive, send)


async def _unauthorised(scope: Scope, receive: Receive, send: Send) -> None:
    """The 401 an API request without a valid token gets, before its body is read or parsed."""
    refusal: Response = ApiJSONResponse(
        {"detail": BEARER_REQUIRED}, 401, headers={"WWW-Authenticate": "Bearer"}
    )
    if not is_api_path(str(scope.get("path", ""))):
        refusal = Response("the token is not valid: sign in again", 401, media_type="text/plain")
    await refusal(scope, receive, send)


def _wants_json(request: Request) -> bool:
    return is_api_path(request.url.path)


def _how_to_fix(error: Any) -> str:
    """A hint for the usual mistake behind an error: a time's `+00:00` sent unencoded in a query
    string arrives as ` 00:00`, since a `+` there means a space."""
    given = error.get("input")
    kind = str(error.get("type", ""))
    if kind.startswith(("datetime", "date_")) and isinstance(given, str) and " " in given.strip():
        return (
            " (a '+' in a query string reads as a space: write the offset's '+' as %2B, "
            "or give the time in UTC ending in Z)"
        )
    return ""


def _validation_detail(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    """Each problem as `where: what`, without echoing the input (a body may carry header secrets)."""
    items = []
    for error in exc.errors():
        loc = [part if isinstance(part, int) else str(part) for part in error.get("loc", ())]
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if error.get("type") == "string_pattern_mismatch":
            fields = [str(part) for part in loc if isinstance(part, str)]
            for name in reversed(fields[:3]):
                if name in PATTERN_MESSAGES:
                    message = PATTERN_MESSAGES[name]
                    break
        message += _how_to_fix(error)
        items.append({"loc": loc, "msg": message, "type": str(error.get("type", "value_error"))})
    detail = "; ".join(f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in items)
    return detail or "the request is invalid", items


def create_app(
    store: Store,
    config: Config,
    *,
    poll_now: PollNow | None = None,
    alerting: Alerting | None = None,
    decisions_only: bool = False,
    peer_metrics: PeerMetrics = list,
) -> FastAPI:
    """The whole web layer over `store`, or with `decisions_only` the decision process's part of it
    (host hooks, the ToolHive PDP, the decision API and /healthz: `monitor.service.decisions`).

    `poll_now(name)` serves POST /servers/{name}/poll (503 when None) and `refresh_on_decision`.
    `alerting` is the policy that closing a session resolves its alerts with; pass the service's own
    so its deliverer is woken (default: one built from `config`). `peer_metrics()` gives the decision
    processes' metrics, which /metrics adds to this process's.
    """
    token = (os.environ.get(config.monitor.api_token_env) or "").strip() or None

    def read_key() -> bytes:
        with store.sessions() as session:
            return web_key(session)

    identity = Identity(
        sessions=store.sessions,
        token=token,
        auth=config.auth,
        signer=Signer(read_key, token),
        log=AuditLog(store.sessions),
        clock=lambda: web.now(),
    )
    web = WebContext(
        store=store,
        config=config,
        token=token,
        poll_now=poll_now,
        clock=lambda: datetime.now(UTC),
        alerting=alerting or Alerting.from_config(config),
        identity=identity,
        peer_metrics=peer_metrics,
    )
    app = FastAPI(
        title="drift-monitor",
        version=monitor.__dict__.get("__version__", "0.1.0"),
        description="Versioned history of what MCP servers claim about their tools, the findings "
        "between versions, alerts and host sessions. Times are ISO 8601 in UTC. Lists are paged "
        "with `limit` and `before` (pass the previous page's `next_before`).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=ApiJSONResponse,
        lifespan=_lifespan,
    )
    app.state.web = web
    app.state.templates = make_environment(WEB / "templates")
    app.state.static_version = _static_version(WEB / "static")

    @app.exception_handler(StarletteHTTPException)
    def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if _wants_json(request):
            return ApiJSONResponse({"detail": str(exc.detail)}, exc.status_code, headers=exc.headers)
        return error_page(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    def invalid(request: Request, exc: RequestValidationError) -> Response:
        detail, items = _validation_detail(exc)
        if _wants_json(request):
            return ApiJSONResponse({"detail": detail, "errors": items}, 422)
        return error_page(request, 422, detail)

    @app.exception_handler(FormRefused)
    def form_refused(request: Request, exc: FormRefused) -> Response:
        return error_page(request, 403, str(exc))

    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, exc: LoginRequired) -> Response:
        return RedirectResponse("/login?" + urlencode({"next": exc.next_path}), status_code=303)

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> Response:
        headers = dict(SECURITY_HEADERS)
        if _wants_json(request):
            return ApiJSONResponse({"detail": "internal error"}, 500, headers=headers)
        return Response("internal error", 500, media_type="text/plain", headers=headers)

    @app.get(
        "/api/v1/openapi.json", include_in_schema=False, dependencies=[Depends(require(Permission.READ))]
    )
    def openapi() -> Response:
        return ApiJSONResponse(app.openapi())

    routers: tuple[APIRouter, ...] = (approvals_api.decisions,)
    if not decisions_only:
        routers += (
            *(module.router for module in (health, servers, snapshots, changes, alerts, sessions)),
            approvals_api.router,
            silences.router,
            fingerprint.router,
            views.router,
            identity_api.router,
        )
    for router in routers:
        app.include_router(router, dependencies=[Depends(known_query_only)])
    app.include_router(health.public)
    # Host hooks answer whatever they are sent (a 422 would let the host run the call): no query check.
    app.include_router(hooks.router)
    app.include_router(hooks.pdp)
    app.state.decision_point = DecisionPoint(store, config, web.now, poll_now)
    settings = config.decisions
    threads = settings.at_once if settings.refresh_on_decision else THREADS  # a refresh waits for a poll
    lane = DecisionLane(settings.at_once, settings.max_waiting, settings.max_wait, threads)
    app.state.decision_lane = lane
    pages = (
        ()
        if decisions_only
        else (
            identity_pages,
            overview,
            server_pages,
            alert_pages,
            alert_page,
            session_pages,
            silence_pages,
            at,
            search,
            refresh,
            approval_pages,
        )
    )
    for page_module in pages:
        app.include_router(page_module.router)
    if not decisions_only:
        app.mount("/static", StaticFiles(directory=WEB / "static"), name="static")
    app.add_middleware(BodyLimit, limit=config.monitor.max_request_bytes)
    app.add_middleware(
        Authenticate,
        identity=identity,
        is_api=is_api_path,
        public=PUBLIC_PATHS,
        basic_paths=frozenset({hooks.TOOLHIVE_DECISION_PATH}),
        self_answering=hooks.HOOK_PATHS,
        refuse=_unauthorised,
        unavailable=_unavailable,
    )
    busy = {**hooks.busy_answers(config), "/api/v1/decisions": approvals_api.busy}
    app.add_middleware(Admission, lane=lane, answers=busy, limit=config.monitor.max_request_bytes)
    app.add_middleware(SecurityHeaders)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The decision point's refreshes poll on this loop; request threads are as many as the engine's
    pool has room for (`monitor.store.db.REQUEST_THREADS`); on shutdown, the decisions still waiting
    to be written are written."""
    to_thread.current_default_thread_limiter().total_tokens = REQUEST_THREADS
    point: DecisionPoint = app.state.decision_point
    if point.refresher is not None:
        point.refresher.loop = asyncio.get_running_loop()
    yield
    await run_in_threadpool(app.state.decision_lane.close)
    await run_in_threadpool(point.recorder.close)
    await run_in_threadpool(app.state.web.identity.log.close)


def _static_version(folder: Path) -> str:
    """A short hash of the static files, appended to their URLs so browsers fetch new ones."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:10]
