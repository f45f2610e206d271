"""A cheap fleet for load: raw JSON-RPC over Streamable HTTP, many servers per process.

    python bench/raw_fleet.py [--servers 1000] [--tools 50] [--first 0] [--delay 0] [--huge-tools 0]

Each server listens on its own 127.0.0.1 port (distinct origins, as a real fleet has) and answers
what a poll sends, from prebuilt bytes: `initialize` (with an `Mcp-Session-Id`, so clients end
the session with DELETE), `notifications/initialized` (202), `tools/list` (one page), `DELETE`
(200), and 405 to the `GET` notification stream (closing that connection, as the end of a
stateful server's stream would); `server/discover` and anything else get
JSON-RPC "method not found". Other connections are kept alive for as long as the client likes.

It is not an MCP implementation (the SDK servers in tests/ and fleet_server.py are): it exists so
the fleet costs little CPU per poll and the monitor, not the fleet, is what a scale benchmark
measures. Listings come in 50 variants (by server number modulo 50) to keep its memory small;
`--first` numbers the servers of a fleet split over several processes. Prints `READY <url> ...`
once every socket listens, and exits when its stdin closes. For hostile load (`bench_fairness.py`),
`--delay` answers every `tools/list` that many seconds late, and `--huge-tools N` gives every server
one listing of N tools (20,000: about 20 MB) instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sys
import threading
from typing import Any

from fleet_server import make_tool

HOST = "127.0.0.1"
PATH = "/mcp"
VARIANTS = 50
HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


def _response(status: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n{extra}"
    if body:
        head += "content-type: application/json\r\n"
    return head.encode() + b"\r\n" + body


class Server:
    """One fleet server's prebuilt answers."""

    def __init__(self, number: int, tools_json: bytes, delay: float = 0.0) -> None:
        self.info = json.dumps({"name": f"raw-{number:05d}", "version": "1.4.2"}).encode()
        self.tools_json = tools_json
        self.delay = delay

    def answer(self, method: str, body: bytes) -> bytes:
        if method == "DELETE":
            return _response("200 OK")
        if method != "POST":
            # As a stateful server's GET stream would, this connection ends with the poll.
            return _response("405 Method Not Allowed", extra="allow: POST, DELETE\r\nconnection: close\r\n")
        message = json.loads(body)
        if "id" not in message:
            return _response("202 Accepted")
        ident = json.dumps(message["id"]).encode()
        name = message.get("method")
        if name == "initialize":
            asked = message.get("params", {}).get("protocolVersion")
            version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
            result = (
                b'{"protocolVersion":"'
                + version.encode()
                + b'","capabilities":{"tools":{"listChanged":false}},'
                b'"serverInfo":' + self.info + b"}"
            )
            session = f"mcp-session-id: {random.getrandbits(64):016x}\r\n"
            return _response("200 OK", self._result(ident, result), session)
        if name == "tools/list":
            return _response("200 OK", self._result(ident, self.tools_json))
        error = b'{"jsonrpc":"2.0","id":' + ident + b',"error":{"code":-32601,"message":"Method not found"}}'
        return _response("200 OK", error)

    @staticmethod
    def _result(ident: bytes, result: bytes) -> bytes:
        return b'{"jsonrpc":"2.0","id":' + ident + b',"result":' + result + b"}"


class Connection(asyncio.Protocol):
    """HTTP/1.1 with keep-alive: a request line, headers, a `content-length` body; nothing more."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                key, _, value = line.partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            answer = self.server.answer(head[0].split(" ", 1)[0], body)
            if self.server.delay and b'"method":"tools/list"' in body.replace(b" ", b""):
                asyncio.get_running_loop().call_later(self.server.delay, self.transport.write, answer)
                continue
            self.transport.write(answer)
            if b"connection: close" in answer[:200]:
                self.transport.close()
                return


def listings(tools: int) -> list[list[dict[str, Any]]]:
    """The fleet's listings: server `n` answers `listings(tools)[n % VARIANTS]`."""
    rng = random.Random(1)
    return [[make_tool(rng, v, i) for i in range(tools)] for v in range(VARIANTS)]


async def serve(count: int, tools: int, first: int, delay: float = 0.0, huge_tools: int = 0) -> None:
    loop = asyncio.get_running_loop()
    if huge_tools:
        rng = random.Random(2)
        huge = [make_tool(rng, 0, i) for i in range(huge_tools)]
        variants = [json.dumps({"tools": huge}, separators=(",", ":")).encode()] * VARIANTS
    else:
        variants = [
            json.dumps({"tools": listing}, separators=(",", ":")).encode() for listing in listings(tools)
        ]
    urls: list[str] = []
    for number in range(first, first + count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        server = Server(number, variants[number % VARIANTS], delay)
        await loop.create_server(lambda server=server: Connection(server), sock=sock, backlog=64)  # type: ignore[misc]
        urls.append(f"http://{HOST}:{sock.getsockname()[1]}{PATH}")
    print("READY " + " ".join(urls), flush=True)
    await asyncio.Event().wait()


def _exit_when_stdin_closes() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=1000)
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--huge-tools", type=int, default=0)
    args = parser.parse_args()
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    asyncio.run(serve(args.servers, args.tools, args.first, args.delay, args.huge_tools))


if __name__ == "__main__":
    main()
