"""Requests on a kept-alive connection (how Node's fetch, Go's net/http and ToolHive call the service)
are answered without waiting for the client's delayed ACK: the listening socket `serve` makes names
TCP, so asyncio turns Nagle's algorithm off on every connection it accepts."""

from __future__ import annotations

import asyncio
import socket

import httpx
import uvicorn
from fastapi import FastAPI

from monitor.service import _listen


async def test_twenty_requests_on_one_connection_and_nodelay_on_the_accepted_socket() -> None:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    listener = _listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:  # the socket already listens: connections queue until the server accepts them
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/healthz"
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(limits=limits) as client:
            ports = set()
            for _ in range(20):
                response = await client.get(url)
                assert response.status_code == 200
                ports.add(response.extensions["network_stream"].get_extra_info("client_addr")[1])
            assert len(ports) == 1, "one kept-alive connection"
            (connection,) = server.server_state.connections
            accepted: socket.socket = connection.transport.get_extra_info("socket")  # type: ignore[attr-defined]
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.should_exit = True
        await serving
