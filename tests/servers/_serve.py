"""Serving an ASGI app for the test servers: on 127.0.0.1, on a port the kernel may choose.

The socket is bound before uvicorn starts so `--port 0` works, and `READY <url>` is printed
only after uvicorn's startup (the app's lifespan included) has finished, so a test can wait
for that line instead of sleeping.
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.types import ASGIApp

HOST = "127.0.0.1"


class _ReadyServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, url: str) -> None:
        super().__init__(config)
        self.url = url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            print(f"READY {self.url}", flush=True)


async def serve_http(app: ASGIApp, port: int, path: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(128)
    url = f"http://{HOST}:{sock.getsockname()[1]}{path}"
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
    await _ReadyServer(config, url).serve(sockets=[sock])
