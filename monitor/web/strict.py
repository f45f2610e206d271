"""Query strings the API does not understand are refused, not ignored.

A filter the endpoint does not have (`/changes?tool=` before it had one) used to be dropped
silently, so the answer looked filtered and was not. Every API route runs `known_query_only`: a
parameter the route does not declare, or one declared once but given several times, is a 422
naming it, in the same error body as every other invalid request.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute


@dataclass(frozen=True)
class QueryShape:
    """The query parameters one route declares, and which of them may repeat (lists)."""

    names: frozenset[str]
    repeatable: frozenset[str]


_SHAPES: dict[int, QueryShape] = {}


def _repeatable(annotation: Any) -> bool:
    origins = {typing.get_origin(annotation)} | {typing.get_origin(a) for a in typing.get_args(annotation)}
    return bool(origins & {list, set, tuple, frozenset})


def _query_fields(dependant: Dependant) -> list[Any]:
    """The query parameters of a dependant and of every dependency under it."""
    fields = list(dependant.query_params)
    for dependency in dependant.dependencies:
        fields += _query_fields(dependency)
    return fields


def query_shape(route: APIRoute) -> QueryShape:
    """Read once per route from its dependant (its own parameters and its dependencies')."""
    shape = _SHAPES.get(id(route))
    if shape is None:
        fields = _query_fields(route.dependant)
        shape = QueryShape(
            frozenset(field.alias for field in fields),
            frozenset(field.alias for field in fields if _repeatable(field.field_info.annotation)),
        )
        _SHAPES[id(route)] = shape
    return shape


def _problem(name: str, message: str, kind: str) -> dict[str, Any]:
    return {"loc": ("query", name), "msg": message, "type": kind}


def _allowed(names: Iterable[str]) -> str:
    listed = ", ".join(sorted(names))
    return f"this endpoint takes: {listed}" if listed else "this endpoint takes no query parameters"


async def known_query_only(request: Request) -> None:
    """422 for an undeclared query parameter or a single-valued one given more than once."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    shape = query_shape(route)
    given = request.query_params
    problems = [
        _problem(name, f"unknown query parameter ({_allowed(shape.names)})", "extra_forbidden")
        for name in dict.fromkeys(given.keys())
        if name not in shape.names
    ]
    problems += [
        _problem(name, "given more than once; it takes one value", "repeated")
        for name in sorted(shape.names - shape.repeatable)
        if len(given.getlist(name)) > 1
    ]
    if problems:
        raise RequestValidationError(problems)


def contradiction(names: tuple[str, ...], message: str) -> RequestValidationError:
    """Parameters that cannot hold together (e.g. `since` after `until`), each named."""
    return RequestValidationError([_problem(name, message, "contradictory") for name in names])
