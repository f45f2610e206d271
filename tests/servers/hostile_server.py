"""A hand-rolled JSON-RPC "MCP server" that misbehaves on purpose, over stdio or Streamable HTTP.

    python tests/servers/hostile_server.py MODE [--transport stdio|http] [--port 0]
        [--require-header NAME:VALUE] [--huge-bytes N]

Modes:
    legacy-only      well behaved, handshake era only (refuses server/discover)
    modern-only      2026-07-28 only: refuses initialize with -32022, serves server/discover
    hang             reads requests, never answers
    hang-after-init  answers initialize, never answers tools/list
    malformed        answers tools/list with text that is not JSON
    rpc-error        answers tools/list with JSON-RPC error -32603 (echoing a secret, see below)
    endless-cursor   every page returns a new cursor
    loop-cursor      cursors a -> b -> a ...
    huge             one page of about --huge-bytes bytes
    not-i-json       valid JSON that RFC 8785 cannot serialise (a NaN in an inputSchema)
    garbage-stdout   (stdio) prints junk on stdout before behaving like legacy-only
    exit-early       (stdio) writes an error to stderr and exits with status 3
    ignore-sigterm   (stdio) legacy-only, but ignores SIGTERM and stdin EOF: only SIGKILL ends it
    torn             two tools a page; tool `a` is removed right after the first page is first served,
                     so a poll that reads page 2 without re-reading page 1 stores a, b, d (c lost)
    listing-file     (stdio) answers tools/list with the text of --listing FILE, read at each request
                     and sent byte for byte (so it may hold NaN, 1e400, \u0000 or lone surrogates)
    no-tools         declares no `tools` capability (prompts only) in initialize and server/discover,
                     and answers tools/list with -32601, as such a server does
    asks-client      (stdio) asked for tools/list, first sends roots/list, sampling/createMessage and
                     elicitation/create to the client and lists one tool per answer, its
                     description the answer's JSON (`{"result": ...}` or `{"error": ...}`)
    grandchild       (stdio) legacy-only, but first starts a child that keeps its stdout and stderr
                     open and sleeps GRANDCHILD_SLEEP s; its pid is written to --pid-file. The server
                     itself exits as soon as its stdin closes

rpc-error's message repeats the Authorization header (HTTP) or $DRIFT_TEST_SECRET (stdio), so
a test can check that the client keeps secrets out of its errors. `--require-header` answers
401 to HTTP requests without that exact header. HTTP prints `READY <url>` once listening.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HANG = object()
"""Sentinel reply: never answer this request."""

MALFORMED = "{this is not json"
MODERN = "2026-07-28"
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODES = (
    "legacy-only",
    "modern-only",
    "hang",
    "hang-after-init",
    "malformed",
    "rpc-error",
    "endless-cursor",
    "loop-cursor",
    "huge",
    "not-i-json",
    "garbage-stdout",
    "exit-early",
    "ignore-sigterm",
    "listing-file",
    "torn",
    "grandchild",
    "no-tools",
    "asks-client",
)
ASKS = {
    "roots": ("roots/list", None),
    "sampling": (
        "sampling/createMessage",
        {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5},
    ),
    "elicitation": (
        "elicitation/create",
        {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}},
    ),
}
"""What `asks-client` asks the client before it lists: tool name -> (method, params)."""
GRANDCHILD_SLEEP = 120
LOOP = {None: "a", "a": "b", "b": "a"}
SERVER_INFO = {"name": "hostile", "version": "6.6.6"}


def tool(name: str, description: str = "") -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


class Hostile:
    def __init__(
        self, mode: str, huge_bytes: int, secret: str | None, listing_file: str | None = None
    ) -> None:
        self.mode = mode
        self.listing_file = listing_file
        self.served_first = False
        self.huge_bytes = huge_bytes
        self.secret = secret

    def reply(self, message: Mapping[str, Any], secret: str | None = None) -> Any:
        """The response to one message: a dict, MALFORMED, HANG, or None for notifications."""
        if "id" not in message or "method" not in message:
            return None
        if self.mode == "hang":
            return HANG
        method, params = message["method"], message.get("params") or {}
        try:
            result = self.result(method, params, secret or self.secret)
        except RpcError as exc:
            return {"jsonrpc": "2.0", "id": message["id"], "error": exc.error}
        if result is HANG or result is MALFORMED:
            return result
        if self.mode == "modern-only" and method != "server/discover":
            result = {**result, "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
        return {"jsonrpc": "2.0", "id": message["id"], "result": result}

    def result(self, method: str, params: Mapping[str, Any], secret: str | None) -> Any:
        if method == "initialize":
            return self.initialize(params)
        if method == "server/discover":
            if self.mode not in ("modern-only", "no-tools"):
                raise RpcError(-32601, "Method not found")
            return {
                "supportedVersions": [MODERN],
                "capabilities": self.capabilities(),
                "resultType": "complete",
                "ttlMs": 0,
                "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return self.tools_list(params.get("cursor"), secret)
        raise RpcError(-32601, "Method not found")

    def initialize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if self.mode == "modern-only":
            data = {"supported": [MODERN], "requested": requested}
            raise RpcError(-32022, "this server speaks only 2026-07-28", data)
        version = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        return {"protocolVersion": version, "capabilities": self.capabilities(), "serverInfo": SERVER_INFO}

    def capabilities(self) -> dict[str, Any]:
        if self.mode == "no-tools":
            return {"prompts": {}}
        return {"tools": {"listChanged": True}} if self.mode == "modern-only" else {"tools": {}}

    def tools_list(self, cursor: str | None, secret: str | None) -> Any:
        if self.mode == "no-tools":
            raise RpcError(-32601, "Method not found")
        if self.mode == "hang-after-init":
            return HANG
        if self.mode == "malformed":
            return MALFORMED
        if self.mode == "rpc-error":
            raise RpcError(-32603, f"boom (token {secret})" if secret else "boom")
        if self.mode == "endless-cursor":
            page = int(cursor or 0)
            return {"tools": [tool(f"t{page}")], "nextCursor": str(page + 1)}
        if self.mode == "loop-cursor":
            return {"tools": [tool(f"t-{cursor}")], "nextCursor": LOOP[cursor]}
        if self.mode == "not-i-json":
            scale = {"name": "scale", "inputSchema": {"type": "object", "maximum": float("nan")}}
            return {"tools": [tool("echo", "Echo the input."), scale]}
        if self.mode == "torn":
            if self.served_first:
                listing = [tool(name) for name in ("b", "c", "d")]
            else:
                listing = [tool(name) for name in ("a", "b", "c", "d")]
            offset = int(cursor or 0)
            self.served_first = True
            page: dict[str, Any] = {"tools": listing[offset : offset + 2]}
            if offset + 2 < len(listing):
                page["nextCursor"] = str(offset + 2)
            return page
        if self.mode == "huge":
            count = max(1, self.huge_bytes // 10_000)
            return {"tools": [tool(f"big{i}", "x" * 10_000) for i in range(count)]}
        return {"tools": [tool("echo", "Echo the input."), tool("add", "Add two numbers.")]}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            self.error["data"] = data


def serve_stdio(server: Hostile, pid_file: str | None = None) -> None:
    if server.mode == "exit-early":
        print("fatal: cannot read config file /etc/hostile.toml", file=sys.stderr, flush=True)
        sys.exit(3)
    if server.mode == "ignore-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if server.mode == "garbage-stdout":
        print("Starting hostile server v6.6.6 ... listening on stdio!", flush=True)
    if server.mode == "grandchild":
        import subprocess

        sleeper = subprocess.Popen(  # inherits stdout and stderr: the pipes stay open while it lives
            [sys.executable, "-c", f"import time; time.sleep({GRANDCHILD_SLEEP})"], stdin=subprocess.DEVNULL
        )
        if pid_file:
            Path(pid_file).write_text(str(sleeper.pid), encoding="utf-8")
    for line in sys.stdin:
        message = json.loads(line)
        if server.mode == "asks-client" and message.get("method") == "tools/list":
            tools = [
                tool(name, json.dumps(ask_client(method, params))) for name, (method, params) in ASKS.items()
            ]
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}}), flush=True)
            continue
        if server.listing_file and message.get("method") == "tools/list":
            text = Path(server.listing_file).read_text(encoding="utf-8")
            print(f'{{"jsonrpc": "2.0", "id": {json.dumps(message["id"])}, "result": {text}}}', flush=True)
            continue
        answer = server.reply(message)
        if answer is None or answer is HANG:
            continue
        print(MALFORMED if answer is MALFORMED else json.dumps(answer), flush=True)
    if server.mode == "ignore-sigterm":
        while True:
            time.sleep(60)


def ask_client(method: str, params: Any) -> dict[str, Any]:
    """Send the client one request over stdio and wait for its answer (`result` or `error`)."""
    ident = f"ask-{method}"
    request: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
    if params is not None:
        request["params"] = params
    print(json.dumps(request), flush=True)
    for line in sys.stdin:
        answer = json.loads(line)
        if answer.get("id") == ident and "method" not in answer:
            return {key: answer[key] for key in ("result", "error") if key in answer}
    return {"error": "the client closed stdin without answering"}


def serve_http(server: Hostile, port: int, required: tuple[str, str] | None) -> None:
    # Imported here, so the stdio modes start without loading the web stack.
    import anyio
    from _serve import serve_http as serve
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def endpoint(request: Request) -> Response:
        if request.method != "POST":
            return Response(status_code=405)
        if required is not None and request.headers.get(required[0]) != required[1]:
            return Response("unauthorized", status_code=401)
        answer = server.reply(json.loads(await request.body()), request.headers.get("authorization"))
        if answer is None:
            return Response(status_code=202)
        if answer is HANG:
            await anyio.sleep_forever()
        if answer is MALFORMED:
            return Response(MALFORMED, media_type="application/json")
        return JSONResponse(answer)

    app = Starlette(routes=[Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"])])
    anyio.run(serve, app, port, "/mcp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--require-header", metavar="NAME:VALUE")
    parser.add_argument("--huge-bytes", type=int, default=2_000_000)
    parser.add_argument("--listing", metavar="FILE")
    parser.add_argument("--pid-file", metavar="FILE")
    args = parser.parse_args()
    server = Hostile(args.mode, args.huge_bytes, os.environ.get("DRIFT_TEST_SECRET"), args.listing)
    if args.transport == "stdio":
        serve_stdio(server, args.pid_file)
    else:
        name, _, value = (args.require_header or "").partition(":")
        serve_http(server, args.port, (name.strip(), value.strip()) if args.require_header else None)


if __name__ == "__main__":
    main()
