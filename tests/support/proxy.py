"""An authenticating reverse proxy on loopback, shaped like oauth2-proxy in front of the dashboard:
it has signed the person in already and forwards every request upstream with the headers that name
them (`X-Forwarded-Email`, `X-Forwarded-Groups`), connecting from its own address (127.0.0.2, so
the monitor can tell it from a client on 127.0.0.1). Whatever the client sent in those headers is
replaced, as oauth2-proxy does."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

PROXY_ADDRESS = "127.0.0.2"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "te"}


@contextmanager
def auth_proxy(upstream: str, person: dict[str, str]) -> Iterator[str]:
    """Serve a proxy to `upstream` (a base URL) that names the person by `person`'s headers; yields
    its base URL and stops it at the end."""
    target = urlsplit(upstream)
    named = {name.lower() for name in person}

    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {
                k: v
                for k, v in self.headers.items()
                if k.lower() not in named and k.lower() not in HOP_BY_HOP
            }
            headers.update(person)
            headers["Host"] = target.netloc
            upstream_connection = http.client.HTTPConnection(
                target.hostname or "127.0.0.1", target.port, timeout=30, source_address=(PROXY_ADDRESS, 0)
            )
            try:
                upstream_connection.request(self.command, self.path, body=body, headers=headers)
                answer = upstream_connection.getresponse()
                content = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
            finally:
                upstream_connection.close()

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test asserts on what arrives."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=server.serve_forever, name="auth-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=15)
    assert not thread.is_alive(), "the proxy did not stop"
