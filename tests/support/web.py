"""The web app under test, built one way: `make_app` (what the browser tests serve and the
benchmarks drive) and `web_client`, a FastAPI `TestClient` on it, signed in the way a test needs.

The app reads its API token once, when it is built, from the environment variable its config names
(`api_token_env`): `make_app` sets that variable only while it builds the app, so no test leaves it
behind. Its clock stands at `NOW` unless a test gives another (`clock=None`: the wall clock).

    with web_client(store) as client:                        # the API, with the bearer token
    with web_client(store, auth=None, follow_redirects=False) as browser:   # has to sign in
    with web_client(store, auth="session") as browser:       # a browser that signed in already
    with web_client(store, token=None, auth=None) as client: # no token configured: read-only

`app_routes` lists every route of an app, for the tests that check each one; `page_text` is the
text a page shows, its markup left out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from html.parser import HTMLParser
from typing import Any, Literal, TypedDict, Unpack

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import Mount

from monitor.app import create_app
from monitor.config import Config, MonitorSettings
from monitor.core.roles import CONFIG_NAME, DEFAULT_TOKEN_NAME, Role
from monitor.identity.signin import SESSION_COOKIE
from monitor.identity.storage import create_token
from monitor.notify.alerts import Alerting
from monitor.store import Store
from monitor.web.context import PollNow
from support.world import NOW

TOKEN = "test-token-7f3a"
TOKEN_ENV = "DRIFT_MONITOR_TEST_API_TOKEN"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
"""The bearer header for `TOKEN`, for a request of a client that does not send it on every one."""

Clock = datetime | Callable[[], datetime] | None
"""The app's clock: an instant it stays at, a function it asks, or None for the wall clock."""
Auth = Literal["bearer", "session"] | None
"""How a client is signed in: the API token on every request (`bearer`), a dashboard session cookie
as a browser holds after signing in (`session`), or not at all (None)."""


class AppOptions(TypedDict, total=False):
    """What `web_client` passes on to `make_app` when it builds the app."""

    token: str | None
    clock: Clock
    poll_now: PollNow | None
    alerting: Alerting | None


def make_app(
    store: Store,
    config: Config | None = None,
    *,
    token: str | None = TOKEN,
    clock: Clock = NOW,
    poll_now: PollNow | None = None,
    alerting: Alerting | None = None,
) -> FastAPI:
    """`create_app(store, config)` with `token` as its API token (None: no token configured).

    `config` defaults to one with `api_token_env = TOKEN_ENV`, polled hourly (so that the clock at
    `NOW`, two hours past `support.world`'s last poll, finds every listing recent); its
    `api_token_env` names the variable the token is put in while the app is built. `poll_now`
    serves POST /servers/{name}/poll and `alerting` is the policy a closed session resolves alerts
    with (both as `create_app` takes them).
    """
    if config is None:
        config = Config(monitor=MonitorSettings(api_token_env=TOKEN_ENV, poll_interval=3600), source="test")
    with environment(config.monitor.api_token_env, token):
        app = create_app(store, config, poll_now=poll_now, alerting=alerting)
    if isinstance(clock, datetime):
        at = clock
        app.state.web.clock = lambda: at
    elif clock is not None:
        app.state.web.clock = clock
    return app


def web_client(
    app: FastAPI | Store,
    config: Config | None = None,
    *,
    auth: Auth = "bearer",
    follow_redirects: bool = True,
    **options: Unpack[AppOptions],
) -> TestClient:
    """A TestClient of `app`, or of `make_app(store, config, **options)`, signed in as `auth` says.

    Use it in a `with` block to run the app's lifespan (its shutdown writes the decisions still
    waiting), or call it plainly for a few requests. The bearer header and the session cookie are
    made from the app's own token.
    """
    if isinstance(app, FastAPI):
        if config is not None or options:
            raise TypeError("the app is built already: give a store to build it with a config or options")
    else:
        app = make_app(app, config, **options)
    token = app.state.web.token
    if auth is not None and token is None:
        raise ValueError(f"auth={auth!r} needs an app with an API token")
    headers = {"Authorization": f"Bearer {token}"} if auth == "bearer" else None
    client = TestClient(app, headers=headers, follow_redirects=follow_redirects)
    if auth == "session":
        hold_session(client, session_value(app))
    return client


def session_value(app: FastAPI, who: str = CONFIG_NAME, *, at: float | None = None, hours: float = 1) -> str:
    """A dashboard session cookie's value as signing in as `who` (a token's name) at `at` (default:
    now) gives, valid for `hours`."""
    signer = app.state.web.identity.signer
    _, value = signer.new_session(who, time.time() if at is None else at, hours * 3600)
    return str(value)


def add_token(
    store: Store, name: str, role: Role | str, *, expires: timedelta | None = None, at: datetime = NOW
) -> str:
    """A named token made as the configured token makes it over the API (by `DEFAULT_TOKEN_NAME`, at
    `at`); its secret."""
    with store.sessions.begin() as session:
        _, secret = create_token(session, name, Role(role), by=DEFAULT_TOKEN_NAME, now=at, expires=expires)
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def hold_session(client: TestClient, value: str) -> None:
    """`client` holds the session cookie `value` (any the app set before is dropped, so exactly one
    is sent)."""
    client.cookies.delete(SESSION_COOKIE)
    client.cookies.set(SESSION_COOKIE, value)


def csrf_of(app: FastAPI, cookie_value: str) -> str:
    """The CSRF token a page shows the holder of the session cookie `cookie_value`."""
    signer = app.state.web.identity.signer
    session = signer.read_session(cookie_value, time.time())
    if session is None:
        raise ValueError("not a valid session cookie of this app")
    return str(signer.csrf(session.sid))


@contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """The environment variable `name` set to `value` (None: unset) for the block, then as it was."""
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def app_routes(app: FastAPI) -> list[tuple[str, str, bool]]:
    """(method, path, in the OpenAPI schema) for every route of the app, included routers flattened
    (FastAPI >= 0.16x keeps them nested; older versions copy them into `app.routes`), mounts aside."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI
        routes: list[Any] = list(app.routes)
    else:
        routes = list(iter_route_contexts(app.routes))
    found = []
    for route in routes:
        if isinstance(getattr(route, "original_route", route), Mount):
            continue
        methods = getattr(route, "methods", None) or {"GET"}
        for method in sorted(set(methods) - {"HEAD"}):
            found.append((method.lower(), str(route.path), bool(getattr(route, "include_in_schema", False))))
    return found


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._hidden += tag in ("head", "script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("head", "script", "style")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def page_text(html: str) -> str:
    """The text a page shows (its body's, entities read, tags and attributes left out), with the
    white space of the markup kept: enough to find a sentence the page reads, however it is marked up."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return "".join(parser.parts)
