"""The decision path at the floor: host hooks and `POST /api/v1/decisions` answered ahead of routing.

Every tool call a host makes is a request here, and through the whole app (the router's path
matching over every page, FastAPI's dependencies and validation, the middleware that pages need, a
hop to a thread and back) one cost about thirty times what a plain ASGI app reading the same body
and looking the tool up costs (docs/approvals.md, "The decision path"). `DecisionFastPath` sits in
front of the app's own layers (`monitor.web.front`) and of the layer that adds the security headers
(it writes them on its own answers: one layer less per decision), inside the lane's door
(`monitor.approvals.lane.Admission`, so a burst is still admitted in order), and answers those
requests itself, on the event loop:

- the caller is identified by its token alone, as the API identifies every caller
  (`Identity.identify_token`: the configured token compared in memory, a named one looked up in the
  tokens kept in memory while their generation stays);
- the body is read once (up to the size limit) and parsed once;
- the decision runs `inline` (`monitor.approvals.cache.INLINE`): from the decision cache and the one
  statement every decision runs. One that needs more (a view or the names to read again, a poll to
  wait for) raises `NotReady` before it has counted or recorded anything and is decided on the
  lane's threads instead, as every decision was before;
- the answer is the same adapter's or the same `Answer.to_dict()`, written as the same JSON.

What it does not answer itself goes on to the app as it came, its body handed on unread: a decision
request with a query string (the API refuses unknown parameters), another content type, a body the
API's model refuses or over the limit, a caller that may not decide, a server the monitor does not
know. Those answers (401, 403, 404, 413, 422) are the app's, word for word.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from monitor.approvals.api import DecisionIn
from monitor.approvals.cache import INLINE, NotReady
from monitor.approvals.hosts import HostAdapter
from monitor.approvals.hosts.base import Hook, read_body
from monitor.approvals.lane import DecisionLane, read_within
from monitor.approvals.point import Answer, DecisionPoint
from monitor.core.roles import Caller, Permission, Via
from monitor.identity.callers import Identity, decide_refusal, token_in

log = logging.getLogger(__name__)

DECISIONS = "/api/v1/decisions"
JSON_HEADERS = [(b"content-type", b"application/json")]
T = TypeVar("T")


class DecisionFastPath:
    """Answers host hooks (`hooks`, by path) and decision requests before the app routes them."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        point: DecisionPoint,
        lane: DecisionLane,
        identity: Identity,
        hooks: Mapping[str, HostAdapter],
        limit: int,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        self.app = app
        self.headers = [*JSON_HEADERS, *headers]
        self.point = point
        self.lane = lane
        self.identity = identity
        self.hooks = hooks
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        adapter = self.hooks.get(scope["path"])
        if adapter is not None:
            await self._hook(adapter, scope, receive, send)
        elif scope["path"] == DECISIONS and not scope["query_string"]:
            await self._decision(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _hook(self, adapter: HostAdapter, scope: Scope, receive: Receive, send: Send) -> None:
        """As `monitor.approvals.hooks` answers it: 200 whatever happens, a caller that may not ask
        and a failure anywhere (identifying, reading, deciding) each answered as the host's deny:
        a host runs the call when its hook fails."""
        try:
            result = await self._hook_answer(adapter, scope, receive)
        except Exception:
            log.exception("a %s hook decision failed: answered deny", adapter.host)
            result = adapter.answer(self.point, "the monitor failed while deciding (see its log)")
        await self._write(send, 200, _ascii(result.model_dump_json(exclude_none=True).encode(), result))

    async def _hook_answer(self, adapter: HostAdapter, scope: Scope, receive: Receive) -> BaseModel:
        headers = _headers(scope)
        caller = self._caller(scope, headers, basic=adapter.basic_auth)
        refused = decide_refusal(self.identity, caller, f"POST {scope['path']}")
        hook: Hook
        if refused is not None:
            hook = refused
        else:
            body, complete = await read_within(receive, self.limit, headers.get(b"content-length", b""))
            oversized = f"the hook input is larger than the {self.limit}-byte limit"
            hook = read_body(body) if complete else oversized
        return await self._decided(adapter.answer, self.point, hook)

    async def _decision(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        kind = headers.get(b"content-type", b"application/json").split(b";", 1)[0].strip().lower()
        caller = self._caller(scope, headers, basic=False)
        if caller.via == Via.UNVERIFIED or not caller.may(Permission.DECIDE) or not _is_json(kind):
            await self.app(scope, receive, send)  # the app's refusal, audited, or its reading of the body
            return
        body, complete = await read_within(receive, self.limit, headers.get(b"content-length", b""))
        asked = _decision_in(body) if complete else None
        answer: Answer | None = None
        try:
            if asked is not None:
                answer = await self._decided(
                    self.point.decide,
                    asked.server,
                    asked.tool,
                    fingerprint=asked.fingerprint,
                    session_id=asked.session_id,
                    client=asked.client,
                    client_capabilities=asked.client_capabilities,
                )
        except Exception:  # the app's 500 (`monitor.web.errors`): this runs ahead of its error handling
            log.exception("a decision request failed")
            await self._write(send, 500, b'{"detail":"internal error"}')
            return
        if answer is None:  # the app's 404, 413 or 422, from the same body
            await self.app(scope, _replaying(body, complete, receive), send)
            return
        content = answer.to_dict()
        await self._write(send, 200, _ascii(orjson.dumps(content), content))

    async def _write(self, send: Send, status: int, body: bytes) -> None:
        """A JSON answer, with the headers every response of the app carries (`headers`, given by
        the app: this layer answers in front of the one that adds them to the app's responses)."""
        headers = [*self.headers, (b"content-length", str(len(body)).encode("ascii"))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _caller(self, scope: Scope, headers: Mapping[bytes, bytes], *, basic: bool) -> Caller:
        """The caller by its token, as `Authenticate` identifies an API request; a database that cannot
        check the token makes it unverified (a deny for a hook, the app's 503 for the API)."""
        source = scope["client"][0] if scope.get("client") else "unknown"
        secret = token_in(headers.get(b"authorization", b"").decode("latin-1"), basic=basic)
        try:
            return self.identity.identify_token(secret, source)
        except SQLAlchemyError as exc:
            log.warning("could not identify a request to %s: the database failed: %s", scope["path"], exc)
            return Caller("unverified", None, Via.UNVERIFIED, source)

    async def _decided(self, decide: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`decide` on the event loop from the cache and one statement, or on the lane's threads when
        it needs more (`NotReady`)."""
        inline = INLINE.set(True)
        try:
            return decide(*args, **kwargs)
        except NotReady:
            pass
        finally:
            INLINE.reset(inline)
        return await self.lane.run(decide, *args, **kwargs)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name (the first of a repeated one, as Starlette reads it)."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name, value)
    return found


def _is_json(kind: bytes) -> bool:
    """A content type FastAPI reads as JSON: `application/json` or any `+json` type."""
    main, _, sub = kind.partition(b"/")
    return main == b"application" and (sub == b"json" or sub.endswith(b"+json"))


def _replaying(read: bytes, complete: bool, receive: Receive) -> Receive:
    """`receive` as the app expects it, with what was read of the body handed on first."""
    pending = True

    async def again() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": read, "more_body": not complete}
        return await receive()

    return again


def _decision_in(body: bytes) -> DecisionIn | None:
    """The decision request as the API's model reads it (None: the app answers it: 422)."""
    try:
        return DecisionIn.model_validate(json.loads(body))
    except (ValueError, ValidationError, RecursionError):
        return None


def _ascii(body: bytes, content: BaseModel | dict[str, Any]) -> bytes:
    """`body` (written by orjson or pydantic-core, a fraction of the standard library's cost) as
    `monitor.web.schemas.ApiJSONResponse` writes `content`: ASCII, anything else escaped. Both write
    compact JSON, so only a body with other characters is written again."""
    if body.isascii():
        return body
    plain = content.model_dump(exclude_none=True) if isinstance(content, BaseModel) else content
    return json.dumps(plain, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
