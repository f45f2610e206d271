"""Hostile MCP servers at the byte level, for the fault-injection suite.

    python tests/servers/faulty_server.py http [--huge-bytes N]
    python tests/servers/faulty_server.py stdio MODE [--huge-bytes N]

`http` serves every HTTP mode from one process, at `/<mode>/mcp` on one port, and also listens on a
second port where it accepts connections and then never reads or answers them. It prints
`READY <base url> <silent url>` once both listen. Each answer closes its connection, so a mode can
cut a body short without confusing a later request. The JSON-RPC is hand-written (no SDK, no web
framework) so every byte on the wire is chosen here.

HTTP modes (tools/list unless said otherwise):
    trickle          the answer's headers at once, then its body one byte every 50 ms
    huge             one page of about --huge-bytes bytes (default 50 MB)
    overdeclared     headers declaring a body of DECLARED_BYTES (1 GB), then the body's first bytes,
                     then nothing more until the client hangs up (at most HOLD_LIMIT s)
    drop-mid-page    page 1 is fine and has a cursor; page 2 sends half its body and hangs up
    wrong-version    initialize answers protocolVersion 1999-01-01
    invalid-json     a body that starts as JSON-RPC and stops being JSON
    rpc-error        JSON-RPC error -32603
    html-error       JSON-RPC error -32603 whose message is markup and bidi controls (HTML_ERROR)
    wrong-id         the answer names another request's id (the request's id + 1000)
    ping-first       an SSE stream that sends a `ping` request first and the listing only once the
                     client POSTed its answer: one tool, "pinged" (or "unanswered" after PING_WAIT s)
    gzip-bomb        a listing of BOMB_BYTES (256 MiB) sent with `Content-Encoding: gzip`: ~0.26 MB
    deflate-bomb     the same as `deflate` (zlib), ~0.26 MB
    br-bomb          the same as `br` (brotli), under 1 KB

stdio modes:
    trickle          as for HTTP, on stdout
    huge             one line of about --huge-bytes bytes
    exit-mid-page    page 1 is fine and has a cursor; asked for page 2, it writes to stderr and exits 1
    wrong-version    as for HTTP

Every mode answers `initialize` (except as said), refuses `server/discover` with -32601 and
answers `ping`. Loops are bounded: a trickle gives up after TRICKLE_LIMIT bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

HTTP_MODES = (
    "trickle",
    "huge",
    "overdeclared",
    "drop-mid-page",
    "wrong-version",
    "invalid-json",
    "rpc-error",
    "html-error",
    "wrong-id",
    "ping-first",
    "gzip-bomb",
    "deflate-bomb",
    "br-bomb",
)
BOMB_BYTES = 256 * 1024 * 1024
"""What a bomb mode's answer decodes to: one tool whose description is this many `x`s."""
BOMB_HEAD = (
    b'{"jsonrpc":"2.0","result":{"tools":[{"name":"bomb","inputSchema":{"type":"object"},"description":"'
)
ZLIB_WBITS = {"gzip-bomb": 31, "deflate-bomb": 15}
"""zlib's window bits for a gzip and a zlib (HTTP `deflate`) stream."""
STDIO_MODES = ("trickle", "huge", "exit-mid-page", "wrong-version")
HOST = "127.0.0.1"
WRONG_VERSION = "1999-01-01"
TRICKLE_DELAY = 0.05
TRICKLE_LIMIT = 2000
"""A trickle stops after this many bytes (100 s), so a server left running cannot loop for ever."""
SERVER_INFO = {"name": "faulty", "version": "0.0.1"}
HTML_ERROR = '<script>alert("err")</script><img src=x onerror=alert(2)> \u202egnp.exe\u202c \u200bhidden'
"""An error message a hostile server chooses, for pages that show a server's last error."""
MAX_HEADER_BYTES = 64 * 1024
DECLARED_BYTES = 1_000_000_000
HOLD_LIMIT = 120.0
"""How long an overdeclared answer holds its connection open for a client that waits for the rest."""
PING_ID = "server-ping"
PING_WAIT = 10.0


def tool(name: str, description: str = "") -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}}


def huge_tools(size: int) -> bytes:
    """The `tools` array of a listing of about `size` bytes, as JSON."""
    description = "x" * 100_000
    count = max(1, size // 100_000)
    return json.dumps([tool(f"big{i}", description) for i in range(count)]).encode()


class Answer:
    """How to send one JSON-RPC response: its body, and whether to trickle it or cut it short."""

    def __init__(
        self,
        body: bytes,
        *,
        trickle: bool = False,
        cut: bool = False,
        encoding: str = "",
        declared: int | None = None,
    ) -> None:
        self.body = body
        self.trickle = trickle
        self.cut = cut
        self.encoding = encoding
        """The body's `Content-Encoding`, when it is compressed."""
        self.declared = declared
        """The `Content-Length` to send, when it is not the body's: the rest never comes."""


def bomb(mode: str, request_id: Any, zlib_base: dict[str, Any]) -> Answer:
    """A JSON-RPC answer of BOMB_BYTES compressed: the id comes last, so the zlib stream of the rest is
    compressed once (kept in `zlib_base`) and copied per answer."""
    import zlib

    tail = b'"}]},"id":' + json.dumps(request_id).encode() + b"}"
    chunk = b"x" * (1 << 20)
    if mode == "br-bomb":
        import brotli

        compressor = brotli.Compressor(quality=5)
        parts = [compressor.process(BOMB_HEAD)]
        parts += [compressor.process(chunk) for _ in range(BOMB_BYTES // len(chunk))]
        parts += [compressor.process(tail), compressor.finish()]
        return Answer(b"".join(parts), encoding="br")
    if mode not in zlib_base:
        base = zlib.compressobj(9, zlib.DEFLATED, ZLIB_WBITS[mode])
        parts = [base.compress(BOMB_HEAD)]
        parts += [base.compress(chunk) for _ in range(BOMB_BYTES // len(chunk))]
        zlib_base[mode] = (base, b"".join(parts))
    base, head = zlib_base[mode]
    stream = base.copy()
    body = head + stream.compress(tail) + stream.flush()
    return Answer(body, encoding="gzip" if mode == "gzip-bomb" else "deflate")


class Faulty:
    def __init__(self, mode: str, huge_bytes: int) -> None:
        self.mode = mode
        self.huge_bytes = huge_bytes
        self._huge: bytes | None = None
        self._zlib_base: dict[str, Any] = {}
        self.pinged = asyncio.Event()

    def prepare(self) -> None:
        if self.mode == "huge" and self._huge is None:
            self._huge = huge_tools(self.huge_bytes)

    def answer(self, message: Any) -> Answer | None:
        """The answer to one JSON-RPC message, or None for a notification."""
        if not isinstance(message, dict) or "id" not in message:
            return None
        if "method" not in message:  # the client's answer to a request of ours
            if message["id"] == PING_ID and "result" in message:
                self.pinged.set()
            return None
        request_id = message["id"]
        method = message.get("method")
        params = message.get("params") or {}
        if method == "initialize":
            requested = params.get("protocolVersion")
            version = WRONG_VERSION if self.mode == "wrong-version" else requested or "2025-11-25"
            return self.result(
                request_id,
                {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": SERVER_INFO},
            )
        if method == "ping":
            return self.result(request_id, {})
        if method == "tools/list":
            return self.tools_list(request_id, params.get("cursor"))
        return self.error(request_id, -32601, "Method not found")

    def tools_list(self, request_id: Any, cursor: str | None) -> Answer:
        if self.mode == "trickle":
            return Answer(self.result(request_id, {"tools": [tool("slow", "s" * 200)]}).body, trickle=True)
        if self.mode == "overdeclared":
            head = json.dumps({"jsonrpc": "2.0", "id": request_id}).encode()[:-1]
            return Answer(head + b',"result":{"tools":[', declared=DECLARED_BYTES)
        if self.mode == "huge":
            self.prepare()
            assert self._huge is not None
            head = json.dumps({"jsonrpc": "2.0", "id": request_id}).encode()[:-1]
            return Answer(head + b',"result":{"tools":' + self._huge + b"}}")
        if self.mode in ("drop-mid-page", "exit-mid-page"):
            if cursor is None:
                return self.result(request_id, {"tools": [tool("page-one")], "nextCursor": "page-2"})
            return Answer(self.result(request_id, {"tools": [tool("page-two", "p" * 4000)]}).body, cut=True)
        if self.mode == "invalid-json":
            return Answer(
                b'{"jsonrpc": "2.0", "id": ' + json.dumps(request_id).encode() + b', "result": {"tools": [{'
            )
        if self.mode == "rpc-error":
            return self.error(request_id, -32603, "internal failure in the tool registry")
        if self.mode == "html-error":
            return self.error(request_id, -32603, HTML_ERROR)
        if self.mode.endswith("-bomb"):
            return bomb(self.mode, request_id, self._zlib_base)
        if self.mode == "wrong-id" and isinstance(request_id, int):
            return self.result(request_id + 1000, {"tools": [tool("misrouted")]})
        return self.result(request_id, {"tools": [tool("fine")]})

    async def ping_first(self, writer: asyncio.StreamWriter, request_id: Any) -> None:
        """tools/list as an SSE stream that pings the client first and lists once the ping is answered."""
        self.pinged.clear()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
        writer.write(sse_event({"jsonrpc": "2.0", "id": PING_ID, "method": "ping"}))
        await writer.drain()
        try:
            await asyncio.wait_for(self.pinged.wait(), PING_WAIT)
            name = "pinged"
        except TimeoutError:
            name = "unanswered"
        writer.write(sse_event({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [tool(name)]}}))

    def result(self, request_id: Any, result: dict[str, Any]) -> Answer:
        return Answer(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode())

    def error(self, request_id: Any, code: int, message: str) -> Answer:
        body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        return Answer(json.dumps(body).encode())


# --- HTTP ------------------------------------------------------------------------------------


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    """(method, path, body) of one HTTP/1.1 request, or None when the client sent none."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


def sse_event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n"


def response_head(
    status: str, length: int, content_type: str = "application/json", encoding: str = ""
) -> bytes:
    coding = f"content-encoding: {encoding}\r\n" if encoding else ""
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {length}\r\n"
        f"{coding}connection: close\r\n\r\n"
    ).encode()


async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: Answer) -> None:
    body = answer.body
    length = len(body) if answer.declared is None else answer.declared
    writer.write(response_head("200 OK", length, encoding=answer.encoding))
    if answer.declared is not None:
        writer.write(body)
        await writer.drain()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader.read(), HOLD_LIMIT)  # returns when the client hangs up
    elif answer.trickle:
        for index in range(min(len(body), TRICKLE_LIMIT)):
            writer.write(body[index : index + 1])
            await writer.drain()
            await asyncio.sleep(TRICKLE_DELAY)
    elif answer.cut:
        writer.write(body[: len(body) // 2])
        await writer.drain()
    else:
        writer.write(body)
        await writer.drain()


def http_handler(servers: dict[str, Faulty]) -> Any:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request(reader)
            if request is None:
                return
            method, path, body = request
            mode = path.strip("/").removesuffix("/mcp")
            server = servers.get(mode)
            if server is None:
                writer.write(response_head("404 Not Found", 0))
            elif method != "POST":
                writer.write(response_head("405 Method Not Allowed", 0))
            elif mode == "ping-first" and (message := json.loads(body)).get("method") == "tools/list":
                await server.ping_first(writer, message["id"])
            else:
                answer = server.answer(json.loads(body))
                if answer is None:
                    writer.write(response_head("202 Accepted", 0))
                else:
                    await send(reader, writer, answer)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client gave up on us, as clients of hostile servers should
        finally:
            writer.close()

    return handle


async def serve_http(huge_bytes: int) -> None:
    servers = {mode: Faulty(mode, huge_bytes) for mode in HTTP_MODES}
    servers["huge"].prepare()  # before READY: building 50 MB of JSON would stall the other modes
    held: list[asyncio.StreamWriter] = []
    never = asyncio.Event()

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never read, never answered, never closed
        await never.wait()

    main = await asyncio.start_server(http_handler(servers), HOST, 0, limit=MAX_HEADER_BYTES)
    quiet = await asyncio.start_server(silent, HOST, 0)
    main_port = main.sockets[0].getsockname()[1]
    quiet_port = quiet.sockets[0].getsockname()[1]
    print(f"READY http://{HOST}:{main_port} http://{HOST}:{quiet_port}/mcp", flush=True)
    async with main, quiet:
        await never.wait()  # until the test kills the process


# --- stdio -----------------------------------------------------------------------------------


def serve_stdio(server: Faulty) -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        answer = server.answer(message)
        if answer is None:
            continue
        if answer.cut:  # exit-mid-page, asked for page 2
            print("worker crashed while paging: segmentation fault", file=sys.stderr, flush=True)
            sys.exit(1)
        try:
            if answer.trickle:
                for index in range(min(len(answer.body), TRICKLE_LIMIT)):
                    out.write(answer.body[index : index + 1])
                    out.flush()
                    time.sleep(TRICKLE_DELAY)
            else:
                out.write(answer.body + b"\n")
                out.flush()
        except BrokenPipeError:
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transport", choices=["http", "stdio"])
    parser.add_argument("mode", nargs="?", choices=STDIO_MODES)
    parser.add_argument("--huge-bytes", type=int, default=50_000_000)
    args = parser.parse_args()
    if args.transport == "http":
        asyncio.run(serve_http(args.huge_bytes))
    else:
        if args.mode is None:
            parser.error("stdio needs a MODE")
        serve_stdio(Faulty(args.mode, args.huge_bytes))


if __name__ == "__main__":
    main()
