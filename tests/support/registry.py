"""A loopback MCP Registry: `GET /v0.1/servers` pages shaped like the official registry's.

Each page is `{"servers": [{"server": <server.json>, "_meta": {...official...}}], "metadata":
{"nextCursor": ..., "count": n}}`; the last page has no `nextCursor`. `limit` and `cursor` are query
parameters, as in the registry's API. Requests are recorded, so a test can see the cursors followed.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OFFICIAL = "io.modelcontextprotocol.registry/official"


class Registry:
    def __init__(self, servers: list[dict[str, Any]], page_size: int = 2) -> None:
        self.servers = servers
        self.page_size = page_size
        self.requests: list[str] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v0.1/servers"

    def page(self, query: dict[str, list[str]]) -> dict[str, Any]:
        start = int(query.get("cursor", ["0"])[0])
        limit = int(query.get("limit", [str(self.page_size)])[0])
        chunk = self.servers[start : start + limit]
        items = []
        for server in chunk:  # a test sets the registry's own metadata of an entry with `OFFICIAL`
            official = {"status": "active", "isLatest": True, **server.get(OFFICIAL, {})}
            entry = {key: value for key, value in server.items() if key != OFFICIAL}
            items.append({"server": entry, "_meta": {OFFICIAL: official}})
        metadata: dict[str, Any] = {"count": len(items)}
        if start + limit < len(self.servers):
            metadata["nextCursor"] = str(start + limit)
        return {"servers": items, "metadata": metadata}

    def __enter__(self) -> Registry:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append(self.path)
                parts = urlsplit(self.path)
                if parts.path != "/v0.1/servers":
                    self.send_error(404)
                    return
                body = json.dumps(registry.page(parse_qs(parts.query))).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02})
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
