"""Who a request is, and whether its role lets it do what it asks (docs/contract.md section 12).

A request is identified once, by the `Authenticate` middleware, before any route reads its body:

1. `Authorization: Bearer <secret>` (or, on ToolHive's endpoint, the secret as the password of
   Basic authentication): the configured token (an admin named `api_token_name`) or a named token;
   a secret that is neither, or revoked, or expired, is a 401 at once, recorded in the audit log.
2. On the dashboard, a person behind a trusted authenticating proxy: the proxy's header, believed
   only from `[auth] trusted_proxies`, with the role `[auth]` gives that person or their groups.
3. On the dashboard, a signed-in session (`monitor.identity.signin`), whose token is checked again
   at every request, so a revoked token signs its sessions out.
   The API takes neither: a browser sends them on its own, and the API's changes carry no CSRF token.
4. Otherwise nobody: an API request is a 401 when anything is configured to authenticate with; with
   nothing configured, reads and decisions are open, as before roles existed, and changes are not.

Routes then ask for a permission (`require`, `require_page`): a caller without it gets a 403 naming
the role it would need (or, on a page, the sign-in page), and the refusal is audited.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

from monitor.config import AuthSettings
from monitor.core.roles import CONFIG_NAME, Caller, Permission, Role, Via, refusal
from monitor.identity.audit import AuditLog, Event
from monitor.identity.known import KnownTokens
from monitor.identity.signin import SESSION_COOKIE, Signer
from monitor.identity.storage import named_caller, tokens_exist

log = logging.getLogger(__name__)
BEARER_REQUIRED = "missing or wrong bearer token (Authorization: Bearer <token>)"
CALLER = "caller"
"""Where the middleware leaves the request's caller (`request.state.caller`)."""
OPEN_CHECK_SECONDS = 10.0
"""How long the absence of named tokens is believed before it is read again."""


class LoginRequired(Exception):
    """A page was asked for by nobody while sign-in is required: redirect to /login."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


@dataclass
class Identity:
    """Everything identifying callers needs, one per web app (`WebContext.identity`)."""

    sessions: sessionmaker[Session]
    token: str | None
    """The configured token (an admin), from the variable `api_token_env` names."""
    token_name: str
    """Who the configured token is (`api_token_name`): the actor of what it changes."""
    auth: AuthSettings
    signer: Signer
    log: AuditLog
    """Events written off the request path (refusals, polls now)."""
    clock: Callable[[], datetime]
    tokens: KnownTokens
    """Named tokens, kept in memory while none is created or revoked."""
    _open_until: float = 0.0

    def identify(self, connection: HTTPConnection, *, basic: bool = False, api: bool = False) -> Caller:
        """The caller, or a `Caller` with `Via.REFUSED` for a secret that is no valid token.

        An API request (`api`) is identified by its token alone: a browser sends the dashboard's
        cookie (and passes a proxy's header) on its own, so a page of another port of the same host
        could otherwise make a signed-in browser call the API, whose changes carry no CSRF token."""
        source = client_address(connection)
        self.signer.load()  # here, off the event loop: the form checks and pages sign with it
        secret = token_in(connection.headers.get("authorization", ""), basic=basic)
        if secret is not None or api:
            return self.identify_token(secret, source)
        if self.auth.proxy_header and trusted(source, self.auth.trusted_proxies):
            person = connection.headers.get(self.auth.proxy_header, "").strip()
            if person:
                return self._proxied(connection, person[:200], source)
        session_cookie = connection.cookies.get(SESSION_COOKIE, "")
        signed = self.signer.read_session(session_cookie, time.time()) if session_cookie else None
        if signed is not None and signed.who:
            if signed.who == CONFIG_NAME and self.token is not None:
                return self.configured(Via.SESSION, source, signed.sid)
            with self.sessions() as session:
                found = named_caller(session, signed.who, self.clock(), source, Via.SESSION)
            if found is not None:
                return Caller(found.name, found.role, Via.SESSION, source, signed.sid)
        sid = signed.sid if signed is not None else None
        return Caller("anonymous", None, Via.OPEN if self.open() else Via.NONE, source, sid)

    def identify_token(self, secret: str | None, source: str) -> Caller:
        """A caller identified by its token alone (an API request, the agentgateway adapter's gRPC
        calls): nobody without one, `Via.REFUSED` for a secret that is no valid token."""
        if secret is None:
            return Caller("anonymous", None, Via.OPEN if self.open() else Via.NONE, source)
        if self.token is not None and hmac.compare_digest(
            secret.encode("utf-8", "surrogatepass"), self.token.encode("utf-8", "surrogatepass")
        ):
            return self.configured(Via.TOKEN, source)
        found = self.tokens.caller(secret, self.clock(), source)
        return found or Caller("an unknown token", None, Via.REFUSED, source)

    def configured(self, via: Via, source: str, session: str | None = None) -> Caller:
        """The caller the configured token is: an admin, under `api_token_name`. A dashboard session
        names it `CONFIG_NAME`, which no named token may take, so renaming it signs nobody out."""
        return Caller(self.token_name, Role.ADMIN, via, source, session)

    def _proxied(self, connection: HTTPConnection, person: str, source: str) -> Caller:
        roles = [self.auth.users[person]] if person in self.auth.users else []
        if self.auth.proxy_groups_header:
            groups = connection.headers.get(self.auth.proxy_groups_header, "")
            roles += [self.auth.groups[g.strip()] for g in groups.split(",") if g.strip() in self.auth.groups]
        if not roles and self.auth.default_role is not None:
            roles = [self.auth.default_role]
        role = max(roles, key=lambda r: len(r.permissions)) if roles else None
        return Caller(person, role, Via.PROXY, source, f"proxy:{person}")

    def open(self) -> bool:
        """Whether nothing is configured to authenticate with: no token, no proxy, no named token."""
        if self.token is not None or self.auth.proxy_header:
            return False
        now = time.monotonic()
        if now < self._open_until:
            return True
        with self.sessions() as session:
            if tokens_exist(session):
                return False
        self._open_until = now + OPEN_CHECK_SECONDS
        return True

    def refuse(self, caller: Caller, action: str, target: str, why: str) -> None:
        """Audit a refused attempt (written off the request path)."""
        self.log.submit(Event(caller, action, target, self.clock(), "refused", {"why": why}))

    def note(self, caller: Caller, action: str, target: str, result: str, **detail: object) -> None:
        """Audit an action that has no transaction of its own here (written off the request path)."""
        self.log.submit(Event(caller, action, target, self.clock(), result, dict(detail)))


def token_in(authorization: str, *, basic: bool) -> str | None:
    """The token an `Authorization` header carries: `Bearer <token>`, or (`basic`) the password of
    Basic authentication. ToolHive's HTTP PDP client sends no headers of its own, but Go sends the
    userinfo of its URL as Basic authentication: `http://drift-monitor:<token>@host/...` carries the
    token as the password."""
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return given.strip() or None
    if not basic or scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(given.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2] or None


def client_address(connection: HTTPConnection) -> str:
    return connection.client.host if connection.client else "unknown"


def trusted(source: str, networks: list[str]) -> bool:
    try:
        address = ipaddress.ip_address(source)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network, strict=False) for network in networks)


class Authenticate:
    """Identifies every request once, before routing; an API request with a bad secret, or with none
    while authentication is required, is answered 401 here, before its body is read, and one that
    cannot be identified because the database failed, 503."""

    def __init__(
        self,
        app: ASGIApp,
        identity: Identity,
        *,
        is_api: Callable[[str], bool],
        public: frozenset[str],
        basic_paths: frozenset[str],
        self_answering: frozenset[str],
        refuse: Callable[[Scope, Receive, Send], Awaitable[None]],
        unavailable: Callable[[Scope, Receive, Send], Awaitable[None]],
    ) -> None:
        self.app = app
        self.identity = identity
        self.is_api = is_api
        self.public = public
        self.basic_paths = basic_paths
        self.self_answering = self_answering
        """Paths whose routes answer every caller themselves (host hooks: a 401 or a 503 would let
        the host run the call, so they answer a deny; `hook_refusal`)."""
        self.refuse = refuse
        self.unavailable = unavailable

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or path in self.public or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        try:
            caller = await run_in_threadpool(
                self.identity.identify, connection, basic=path in self.basic_paths, api=self.is_api(path)
            )
        except SQLAlchemyError as exc:
            log.warning("could not identify a request to %s: the database failed: %s", path, exc)
            caller = Caller("unverified", None, Via.UNVERIFIED, client_address(connection))
            if path not in self.self_answering:
                await self.unavailable(scope, receive, send)
                return
        scope.setdefault("state", {})[CALLER] = caller
        if path in self.self_answering:  # a host hook: its route answers every caller, in the host's terms
            await self.app(scope, receive, send)
            return
        api = self.is_api(path)
        if caller.via == Via.REFUSED or (api and caller.via == Via.NONE):
            why = "a token that is not valid" if caller.via == Via.REFUSED else "no token"
            self.identity.refuse(caller, "auth.refused", f"{scope.get('method', '')} {path}", why)
            if api or caller.via == Via.REFUSED:
                await self.refuse(scope, receive, send)
                return
        await self.app(scope, receive, send)


def caller_of(connection: HTTPConnection) -> Caller:
    """The request's caller; nobody for what `Authenticate` lets through unidentified (static files)."""
    caller: Caller | None = getattr(connection.state, CALLER, None)
    return caller or Caller("anonymous", None, Via.NONE, client_address(connection))


async def the_caller(request: Request) -> Caller:
    return caller_of(request)


TheCaller = Annotated[Caller, Depends(the_caller)]


def no_token_message(token_env: str) -> str:
    return f"no API token is configured: set the environment variable {token_env} to allow changes"


bearer_scheme = HTTPBearer(
    auto_error=False,
    description="A token: a named one (`drift-monitor token create`), or the configured one, from the "
    "environment variable named by `api_token_env` (default DRIFT_MONITOR_API_TOKEN).",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer_scheme)]


async def declares_bearer(_credentials: Bearer = None) -> None:
    """Shows the bearer scheme in the OpenAPI document for routes that check the caller themselves."""


def hook_refusal(request: Request) -> str | None:
    """Why the caller of a host hook may not have a decision (None: it may): the hook answers this
    as a deny, since a host runs the call when its hook gets a 401 or 403. The refusal is audited."""
    identity: Identity = request.app.state.web.identity
    return decide_refusal(identity, caller_of(request), f"{request.method} {request.url.path}")


def decide_refusal(identity: Identity, caller: Caller, target: str) -> str | None:
    """Why `caller` may not have a decision (None: it may), audited as `hook.refused` on `target`."""
    if caller.may(Permission.DECIDE):
        return None
    if caller.via == Via.UNVERIFIED:
        why = "the monitor could not check this hook's token: its database did not answer"
    elif caller.via == Via.REFUSED:
        why = "this hook's token is not valid (unknown, revoked or expired): a deny until it is fixed"
    elif caller.role is None:
        why = "this hook sent no token: a deny until it sends one with the role decide"
    else:
        why = f"this hook's token may not ask for decisions: {refusal(caller, Permission.DECIDE)}"
    identity.refuse(caller, "hook.refused", target, why)
    return why


def require(*permissions: Permission) -> Callable[..., Awaitable[None]]:
    """An API dependency: the caller must hold one of `permissions`, else 403 naming the role needed."""
    permission = permissions[0]

    async def check(request: Request, _credentials: Bearer = None) -> None:
        caller = caller_of(request)
        if any(caller.may(p) for p in permissions):
            return
        identity: Identity = request.app.state.web.identity
        if caller.via == Via.OPEN:
            message = no_token_message(request.app.state.web.token_env)
        else:
            message = refusal(caller, permission)
        identity.refuse(caller, "role.refused", f"{request.method} {request.url.path}", message)
        raise HTTPException(403, message)

    return check


def require_page(permission: Permission) -> Callable[[Request], Awaitable[None]]:
    """A page dependency: a page asked for by nobody, while sign-in is required, leads to the sign-in
    page; any other caller without `permission` (a form posted by nobody included) gets a 403 page."""

    async def check(request: Request) -> None:
        caller = caller_of(request)
        if caller.may(permission):
            return
        if request.method == "GET" and caller.via == Via.NONE:
            query = request.url.query
            raise LoginRequired(request.url.path + (f"?{query}" if query else ""))
        identity: Identity = request.app.state.web.identity
        if caller.via == Via.OPEN:
            message = no_token_message(request.app.state.web.token_env)
        elif caller.via == Via.PROXY and caller.role is None:
            message = (
                f"{caller.name} has no role here: an admin can give one in [auth] users or groups "
                "(or default_role)"
            )
        elif caller.role is None:
            message = "sign in to do this"
        else:
            message = refusal(caller, permission)
        identity.refuse(caller, "role.refused", f"{request.method} {request.url.path}", message)
        raise HTTPException(403, message)

    return check


may_read = require(Permission.READ)
may_decide = require(Permission.DECIDE)
may_report = require(Permission.REPORT)
may_respond = require(Permission.RESPOND)
may_approve = require(Permission.APPROVE)
may_administer = require(Permission.ADMIN)
page_read = require_page(Permission.READ)
page_respond = require_page(Permission.RESPOND)
page_approve = require_page(Permission.APPROVE)
page_administer = require_page(Permission.ADMIN)
