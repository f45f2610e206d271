"""Host hooks over HTTP (docs/contract.md sections 10 and 11): each host adapter of
`monitor.approvals.hosts` served at its path, answered through the decision lane.

`POST /api/v1/decisions` (`monitor.approvals.api`) is the general form; each host's hook asks the same
`DecisionPoint`, then answers in the host's own terms. A host lets the call run when its hook fails
(a non-2xx answer, a timeout, an unreadable answer), so every request is answered 200: a caller
without the right to ask (no token, a wrong, revoked or expired one, another role), an input that
cannot be read, nested too deeply or larger than the limit, and a failure while deciding are each a
deny with the reason. A decision never reads the tool's input.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel

from monitor.approvals.api import Point
from monitor.approvals.hosts import HOSTS, HostAdapter
from monitor.approvals.hosts.base import read_body, read_input
from monitor.approvals.lane import DecisionLane
from monitor.config import Config
from monitor.core.states import DecisionKind
from monitor.identity.callers import declares_bearer, hook_refusal
from monitor.web.deps import Web
from monitor.web.schemas import ERRORS, ApiJSONResponse

log = logging.getLogger(__name__)

router = APIRouter(
    tags=["decisions"],
    dependencies=[Depends(declares_bearer)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
"""Every host adapter's route. Host hooks answer whatever they are sent (a 422 would let the host
run the call), so the app adds no query-string check to them."""


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _endpoint(adapter: HostAdapter) -> Callable[[Request, Point, Web], Awaitable[Response]]:
    """The route answering `adapter`'s host, 200 whatever happens: a caller that may not ask (no token,
    a wrong or revoked one, another role, a database that cannot check it) and a failure while
    deciding are denies, because the host would run the call on a 401, a 403 or a 500."""

    async def answer_hook(request: Request, point: Point, web: Web) -> Response:
        refused = hook_refusal(request)
        limit = web.config.monitor.max_request_bytes
        hook = refused if refused is not None else await read_input(request, limit)
        lane: DecisionLane = request.app.state.decision_lane
        try:
            result = await lane.run(adapter.answer, point, hook)
        except Exception:
            log.exception("a %s hook decision failed: answered deny", adapter.host)
            result = adapter.answer(point, "the monitor failed while deciding (see its log)")
        return ApiJSONResponse(result.model_dump(exclude_none=True))

    return answer_hook


for _adapter in HOSTS.values():
    router.add_api_route(
        _adapter.path,
        _endpoint(_adapter),
        methods=["POST"],
        name=_adapter.endpoint,
        summary=_adapter.summary,
        response_model=_adapter.output,
        response_model_exclude_none=True,
        openapi_extra=_documented(_adapter.input),
    )


def busy_decision(config: Config) -> DecisionKind:
    """What a call the monitor had no time to decide gets: what it cannot verify recently gets,
    `[decisions] stale_decision` (ask, or deny); never allow."""
    return DecisionKind(config.decisions.stale_decision)


def busy_answers(config: Config) -> dict[str, Callable[[bytes], Response]]:
    """For `monitor.approvals.lane.Admission`: each hook path's answer, from the request's body, when
    the lane is full. The caller was not identified, so nothing here is an allow."""
    decision = busy_decision(config)

    def answering(adapter: HostAdapter) -> Callable[[bytes], Response]:
        def answer(body: bytes) -> Response:
            return ApiJSONResponse(adapter.busy(read_body(body), decision).model_dump(exclude_none=True))

        return answer

    return {path: answering(adapter) for path, adapter in HOSTS.items()}
