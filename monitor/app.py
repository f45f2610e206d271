"""The web app factory: the JSON API, the dashboard, static files and the headers every response gets.

`drift-monitor serve` builds the Store and runs `create_app(store, config, poll_now=...)` with
uvicorn; tests call it directly. The API token is read once here from the environment variable
named by `config.monitor.api_token_env`.

It is a composition root: the one module that knows every feature package, and puts their routers
together over the web plumbing (`monitor.web`: the context, the middleware, the error handlers).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from anyio import to_thread
from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import ASGIApp

import monitor
from monitor.alerts import api as alerts
from monitor.alerts import page as alert_page
from monitor.alerts import pages as alert_pages
from monitor.approvals import api as approvals_api
from monitor.approvals import hooks
from monitor.approvals import pages as approval_pages
from monitor.approvals.fastpath import DecisionFastPath
from monitor.approvals.hosts import BASIC_AUTH_PATHS, HOOK_PATHS, HOSTS
from monitor.approvals.lane import THREADS, Admission, DecisionLane
from monitor.approvals.point import DecisionPoint
from monitor.config import Config
from monitor.core.roles import Permission
from monitor.health import api as health
from monitor.history import api as snapshots
from monitor.history import at, changes, fingerprint, search
from monitor.identity.audit import AuditLog
from monitor.identity.callers import (
    Authenticate,
    Identity,
    require,
)
from monitor.identity.known import KnownTokens
from monitor.identity.signin import Signer
from monitor.identity.storage import web_key
from monitor.notify.alerts import Alerting
from monitor.servers import api as servers
from monitor.servers import overview, views
from monitor.servers import pages as server_pages
from monitor.sessions import api as sessions
from monitor.sessions import pages as session_pages
from monitor.silences import api as silences
from monitor.silences import pages as silence_pages
from monitor.store import Store
from monitor.store.db import REQUEST_THREADS
from monitor.tokens import api as identity_api
from monitor.tokens import pages as identity_pages
from monitor.web import refresh
from monitor.web.context import PeerMetrics, PollNow, WebContext
from monitor.web.errors import install_error_handlers
from monitor.web.front import FrontedApp
from monitor.web.middleware import (
    ANSWER_HEADERS,
    PUBLIC_PATHS,
    BodyLimit,
    SecurityHeaders,
    is_api_path,
    unauthorised,
    unavailable,
)
from monitor.web.rendering import make_environment
from monitor.web.schemas import ApiJSONResponse
from monitor.web.strict import known_query_only

WEB = Path(monitor.__file__).resolve().parent.parent / "web"


DECISION_ROUTERS: tuple[APIRouter, ...] = (approvals_api.decisions,)
"""What the decision processes serve too, besides the host hooks and `/healthz`."""
API_ROUTERS: tuple[APIRouter, ...] = (
    *(module.router for module in (health, servers, snapshots, changes, alerts, sessions)),
    approvals_api.router,
    silences.router,
    fingerprint.router,
    views.router,
    identity_api.router,
)
"""Every feature package's routers under `/api/v1`, each refusing query parameters it does not take."""
PAGES: tuple[APIRouter, ...] = tuple(
    module.router
    for module in (
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
"""Every dashboard page's router, in the order their paths are matched."""


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

    audit = AuditLog(store.sessions)
    identity = Identity(
        sessions=store.sessions,
        token=token,
        token_name=config.monitor.api_token_name,
        auth=config.auth,
        signer=Signer(read_key, token),
        log=audit,
        clock=lambda: web.now(),
        tokens=KnownTokens(store.sessions, store.reads, audit.token_used),
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
    app = FrontedApp(
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

    install_error_handlers(app)

    @app.get(
        "/api/v1/openapi.json", include_in_schema=False, dependencies=[Depends(require(Permission.READ))]
    )
    def openapi() -> Response:
        return ApiJSONResponse(app.openapi())

    routers = DECISION_ROUTERS if decisions_only else DECISION_ROUTERS + API_ROUTERS
    for router in routers:
        app.include_router(router, dependencies=[Depends(known_query_only)])
    app.include_router(health.public)
    # Host hooks answer whatever they are sent (a 422 would let the host run the call): no query check.
    app.include_router(hooks.router)
    app.state.decision_point = DecisionPoint(store, config, web.now, poll_now)
    settings = config.decisions
    threads = settings.at_once if settings.refresh_on_decision else THREADS  # a refresh waits for a poll
    lane = DecisionLane(settings.at_once, settings.max_waiting, settings.max_wait, threads)
    app.state.decision_lane = lane
    for page in () if decisions_only else PAGES:
        app.include_router(page)
    if not decisions_only:
        app.mount("/static", StaticFiles(directory=WEB / "static"), name="static")
    app.add_middleware(BodyLimit, limit=config.monitor.max_request_bytes, exempt=HOOK_PATHS)
    app.add_middleware(
        Authenticate,
        identity=identity,
        is_api=is_api_path,
        public=PUBLIC_PATHS,
        basic_paths=BASIC_AUTH_PATHS,
        self_answering=HOOK_PATHS,
        refuse=unauthorised,
        unavailable=unavailable,
    )
    # In front of FastAPI's own layers, outermost last: the security headers, the decision path
    # (which writes them on its own answers, saving a layer on every decision), the lane's door.
    app.add_front(SecurityHeaders)
    if settings.fast_path:
        app.add_front(
            DecisionFastPath,
            point=app.state.decision_point,
            lane=lane,
            identity=identity,
            hooks=HOSTS,
            limit=config.monitor.max_request_bytes,
            headers=ANSWER_HEADERS,
        )
    busy = {**hooks.busy_answers(config), "/api/v1/decisions": approvals_api.busy}
    secured = {path: _secured(answer) for path, answer in busy.items()}
    app.add_front(Admission, lane=lane, answers=secured, limit=config.monitor.max_request_bytes)
    return app


def _secured(answer: Callable[[bytes], Response]) -> Callable[[bytes], ASGIApp]:
    """The lane's busy answer with the security headers every response carries (`Admission` answers
    in front of the layer that adds them)."""
    return lambda body: SecurityHeaders(answer(body))


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The decision point's refreshes poll on this loop; request threads are as many as the engine's
    pool has room for (`monitor.store.db.REQUEST_THREADS`); the decision views are built on a thread
    of their own (`DecisionPoint.warm`); on shutdown, the decisions still waiting to be written are
    written."""
    to_thread.current_default_thread_limiter().total_tokens = REQUEST_THREADS
    point: DecisionPoint = app.state.decision_point
    if point.refresher is not None:
        point.refresher.loop = asyncio.get_running_loop()
    warming = threading.Thread(target=point.warm, name="decision-views", daemon=True)
    warming.start()
    yield
    point.stop_warming()
    await run_in_threadpool(warming.join)
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
