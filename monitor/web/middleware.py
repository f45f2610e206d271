"""What every response passes through: security headers (a page may run nothing), the request-body
limit, and the answers given before a handler runs (who is calling could not be checked, or is not
allowed to call at all).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from monitor.identity.callers import BEARER_REQUIRED
from monitor.web.schemas import ApiJSONResponse

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


_RAW_HEADERS = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in SECURITY_HEADERS]
_SET = frozenset(name for name, _ in _RAW_HEADERS)
_STATIC_CACHE = (b"cache-control", b"public, max-age=3600")
_NO_STORE = (b"cache-control", b"no-store")
ANSWER_HEADERS = (*_RAW_HEADERS, _NO_STORE)
"""What `SecurityHeaders` adds to an API answer, for a layer that answers in front of it."""


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
                given = message.get("headers", ())
                names = {name for name, _ in given}
                if not names.isdisjoint(_SET):
                    given = [(name, value) for name, value in given if name not in _SET]
                cache = () if b"cache-control" in names else (_STATIC_CACHE if static else _NO_STORE,)
                message["headers"] = [*given, *_RAW_HEADERS, *cache]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413, by their Content-Length before reading
    anything, and by counting as they arrive when chunked; the body is never read past the limit.
    Paths in `exempt` read theirs themselves (host hooks: a host runs the tool when its hook gets an
    error status, so an oversized hook input is answered as a deny instead)."""

    def __init__(self, app: ASGIApp, limit: int, exempt: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.limit = limit
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self.exempt:
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


async def unavailable(scope: Scope, receive: Receive, send: Send) -> None:
    """The 503 a request gets when who it is cannot be checked: the database did not answer."""
    detail = "the database did not answer: try again shortly"
    answer: Response = ApiJSONResponse({"detail": detail}, 503, headers={"Retry-After": "5"})
    if not is_api_path(str(scope.get("path", ""))):
        answer = Response(detail, 503, media_type="text/plain", headers={"Retry-After": "5"})
    await answer(scope, receive, send)


async def unauthorised(scope: Scope, receive: Receive, send: Send) -> None:
    """The 401 an API request without a valid token gets, before its body is read or parsed."""
    refusal: Response = ApiJSONResponse(
        {"detail": BEARER_REQUIRED}, 401, headers={"WWW-Authenticate": "Bearer"}
    )
    if not is_api_path(str(scope.get("path", ""))):
        refusal = Response("the token is not valid: sign in again", 401, media_type="text/plain")
    await refusal(scope, receive, send)
