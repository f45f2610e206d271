"""FastAPI with middleware ahead of its own: what must run for every request before the framework.

Starlette builds every `add_middleware` layer inside its error middleware, behind FastAPI's own
(telemetry checks that read the environment at each request, a body limit): layers every page needs.
A host's hook call is answered before all of them (`monitor.approvals.fastpath`), so the few layers
that every answer needs, the security headers and the decision lane's door, and the fast path
itself, are put in front here; the last one added runs first.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send


class FrontedApp(FastAPI):
    """A FastAPI app whose `front` layers run before FastAPI's own stack (built at the first call)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._front_layers: list[tuple[type[Any], dict[str, Any]]] = []
        self._front: ASGIApp | None = None

    def add_front(self, layer: type[Any], **options: Any) -> None:
        """Put `layer(app, **options)` in front of everything added before it (as `add_middleware`
        does, the last one added runs first)."""
        if self._front is not None:
            raise RuntimeError("the app has started: its front is built")
        self._front_layers.append((layer, options))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._front is None:
            app: ASGIApp = functools.partial(FastAPI.__call__, self)
            for layer, options in self._front_layers:
                app = layer(app, **options)
            self._front = app
        await self._front(scope, receive, send)
