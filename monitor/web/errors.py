"""Errors as each caller reads them: JSON with `detail` (and each problem's place) for the API, a
page for the dashboard, a redirect to sign in for a dashboard visitor who has not. Nothing echoes
the input (a body may carry header secrets).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse, Response

from monitor.identity.callers import LoginRequired
from monitor.web.csrf import FormRefused
from monitor.web.middleware import SECURITY_HEADERS, is_api_path
from monitor.web.rendering import error_page
from monitor.web.schemas import PATTERN_MESSAGES, ApiJSONResponse


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of `app` in its caller's terms. Handlers that render a page are sync, so
    that Starlette runs them (and their database read) in its threadpool, as FastAPI does handlers."""

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
