"""A fleet of Streamable HTTP MCP servers in one process: each an `MCPServer` app on its own port.

    python bench/fleet_server.py [--servers 200] [--tools 50] [--seed 1]

Hundreds of separate server processes would cost gigabytes and minutes of startup, so one
uvicorn server listens on every fleet socket (all bound to 127.0.0.1, ports chosen by the
kernel) and an ASGI dispatcher hands each request to the app of the port it arrived on. Every
app is the SDK's own `MCPServer.streamable_http_app()` (stateful sessions, SSE responses, DNS
rebinding protection): the dispatcher runs each app's session manager in the shared lifespan,
which is all the app's own Starlette lifespan would do.

Each server has its own deterministic set of tools (descriptions of a few hundred characters,
small nested input schemas, annotations), answered by a middleware as prebuilt JSON so the
fleet spends as little CPU as possible per `tools/list` (the SDK's transports, sessions and
handshake still do their full work). Prints `READY <url> <url> ...` once every socket listens,
and exits when its stdin closes, so it never outlives the benchmark that started it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import sys
import threading
from contextlib import AsyncExitStack
from typing import Any

import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp, Receive, Scope, Send

HOST = "127.0.0.1"
PATH = "/mcp"

VERBS = ["search", "get", "list", "create", "update", "delete", "export", "sync", "archive", "restart"]
NOUNS = [
    *("incident", "ticket", "deployment", "invoice", "customer", "repository", "pipeline", "alert"),
    *("dashboard", "report", "runbook", "secret", "bucket", "user", "schedule", "metric", "document"),
]
SENTENCES = [
    "Returns at most `limit` results, newest first, with a cursor for the next page.",
    "Requires the caller to hold the matching workspace role; other callers get a 403.",
    "Use this before making changes so the user can confirm what will be affected.",
    "Timestamps are ISO 8601 in UTC; durations are whole seconds.",
    "The operation is applied to the primary region and replicated within a minute.",
    "Fields that are not set keep their current value.",
    "Archived items are excluded unless `include_archived` is true.",
    "Rate limited to 60 calls a minute per workspace; retries back off exponentially.",
    "Results reflect the search index, which may lag writes by a few seconds.",
    "Identifiers are stable across renames and safe to store.",
]


def make_tool(rng: random.Random, server: int, index: int) -> dict[str, Any]:
    verb, noun = VERBS[index % len(VERBS)], NOUNS[(index // len(VERBS) + server) % len(NOUNS)]
    name = f"{verb}_{noun}s" if verb in ("search", "list", "export", "sync") else f"{verb}_{noun}"
    if index >= len(VERBS) * len(NOUNS):
        name = f"{name}_{index}"
    read_only = verb in ("search", "get", "list", "export")
    description = f"{verb.capitalize()} {noun}s in the connected workspace (server {server}). " + " ".join(
        rng.sample(SENTENCES, rng.randint(3, 5))
    )
    properties: dict[str, Any] = {
        "workspace_id": {"type": "string", "description": "Workspace that owns the records."},
        f"{noun}_id": {
            "type": "string",
            "description": f"Identifier of the {noun}.",
            "pattern": "^[a-z0-9-]+$",
        },
    }
    if read_only:
        properties["limit"] = {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}
        properties["filter"] = {
            "type": "object",
            "description": "Only records matching every given field.",
            "properties": {
                "status": {"type": "string", "enum": ["open", "closed", "pending"]},
                "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
                "since": {"type": "string", "format": "date-time"},
            },
            "additionalProperties": False,
        }
    else:
        properties["changes"] = {
            "type": "object",
            "description": f"Fields of the {noun} to set.",
            "properties": {
                "title": {"type": "string", "maxLength": 200},
                "owner": {"type": "string"},
                "priority": {"type": "integer", "minimum": 1, "maximum": 5},
            },
        }
        properties["dry_run"] = {"type": "boolean", "default": False}
    tool: dict[str, Any] = {
        "name": name,
        "title": f"{verb.capitalize()} {noun}",
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": ["workspace_id"] if read_only else ["workspace_id", f"{noun}_id"],
        },
        "annotations": {
            "title": f"{verb.capitalize()} {noun}",
            "readOnlyHint": read_only,
            "destructiveHint": verb in ("delete", "archive"),
            "idempotentHint": verb in ("get", "update", "sync"),
            "openWorldHint": rng.random() < 0.3,
        },
    }
    if read_only and rng.random() < 0.5:
        tool["outputSchema"] = {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "object"}},
                "next": {"type": "string"},
            },
        }
    return tool


class PrebuiltTools:
    """Server middleware answering `tools/list` with one prebuilt page; everything else is the SDK's."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.result = {"tools": tools}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/list" and ctx.request_id is not None:
            return dict(self.result)
        return await call_next(ctx)


class Fleet:
    """One ASGI app for many: a request goes to the app of the port it arrived on."""

    def __init__(self, apps: dict[int, ASGIApp], managers: list[StreamableHTTPSessionManager]) -> None:
        self.apps = apps
        self.managers = managers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.apps[scope["server"][1]](scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with AsyncExitStack() as stack:
            for manager in self.managers:
                await stack.enter_async_context(manager.run())
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})


class _ReadyServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, urls: list[str]) -> None:
        super().__init__(config)
        self.urls = urls

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            print("READY " + " ".join(self.urls), flush=True)


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=200)
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()

    rng = random.Random(args.seed)
    sockets: list[socket.socket] = []
    apps: dict[int, ASGIApp] = {}
    managers: list[StreamableHTTPSessionManager] = []
    urls: list[str] = []
    for server in range(args.servers):
        tools = [make_tool(rng, server, index) for index in range(args.tools)]
        mcp = MCPServer(
            f"fleet-{server:03d}", version="1.4.2", middleware=[PrebuiltTools(tools)], log_level="WARNING"
        )
        app = mcp.streamable_http_app(streamable_http_path=PATH, host=HOST)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        sock.listen(256)
        port = sock.getsockname()[1]
        sockets.append(sock)
        apps[port] = app
        managers.append(mcp.session_manager)
        urls.append(f"http://{HOST}:{port}{PATH}")

    config = uvicorn.Config(
        Fleet(apps, managers),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    asyncio.run(_ReadyServer(config, urls).serve(sockets=sockets))


if __name__ == "__main__":
    main()
