"""A real webhook receiver on 127.0.0.1 that checks Standard Webhooks signatures on its own.

The check is written here by hand (hmac + base64), independently of `monitor.sinks.signing`, so a
signing bug cannot hide behind a shared helper. The receiver can be told to answer the next
requests with errors, to hang, or be stopped (its port closed) and started again on the same port.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from support.processes import WAIT

TOLERANCE = 300
HANG_LIMIT = 20.0
"""A hanging handler gives up after this long even if the test never releases it."""


def webhook_secret(key: bytes) -> str:
    """The `whsec_...` form of a signing key, as an operator puts it in the secret's variable."""
    return "whsec_" + base64.b64encode(key).decode()


def verify(key: bytes, headers: Any, body: bytes) -> bool:
    """The receiver side of the Standard Webhooks scheme, as a third party would write it."""
    msg_id, timestamp, signatures = (
        headers.get("webhook-id"),
        headers.get("webhook-timestamp"),
        headers.get("webhook-signature"),
    )
    if not (msg_id and timestamp and signatures) or abs(time.time() - int(timestamp)) > TOLERANCE:
        return False
    signed = msg_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(value, expected)
        for version, _, value in (part.partition(",") for part in signatures.split(" "))
    )


@dataclass
class Request:
    id: str | None
    timestamp: str | None
    signature: str | None
    body: bytes
    verified: bool | None
    status: int | None
    """What the receiver answered; None when it hung up without answering."""
    headers: dict[str, str] = field(default_factory=dict)
    path: str = ""


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


class Receiver:
    def __init__(self, key: bytes | None = None) -> None:
        self.key = key
        self.port = 0
        self.replies: deque[Reply] = deque()
        self.requests: list[Request] = []
        self.delivered: Counter[str] = Counter()
        """webhook-id -> how many times it was answered with a 2xx."""
        self._changed = threading.Condition()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # concurrent deliverers connect all at once
            daemon_threads = False  # handler threads are joined on stop

        self._release.clear()
        self._server = Server(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="webhook-receiver"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the port: clients now get connection refused. Hanging handlers are released."""
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def release(self) -> None:
        self._release.set()

    def wait_for(self, predicate: Any, timeout: float = WAIT) -> bool:
        with self._changed:
            return bool(self._changed.wait_for(lambda: predicate(self), timeout))

    def wait_delivered(self, count: int, timeout: float = WAIT) -> bool:
        return self.wait_for(lambda r: sum(r.delivered.values()) >= count, timeout)

    def wait_received(self, count: int, timeout: float = WAIT) -> bool:
        return self.wait_for(lambda r: len(r.requests) >= count, timeout)

    def events(self) -> list[dict[str, Any]]:
        """The bodies of the webhooks answered with a 2xx, once per webhook-id, in arrival order;
        every one must have passed the signature check."""
        seen: dict[str, dict[str, Any]] = {}
        with self._changed:
            requests = list(self.requests)
        for request in requests:
            if request.status is not None and 200 <= request.status < 300 and request.id:
                assert request.verified, "every delivery is signed"
                seen.setdefault(request.id, json.loads(request.body))
        return list(seen.values())

    def wait_event(self, predicate: Any, timeout: float = WAIT) -> dict[str, Any]:
        """The first delivered event matching `predicate`, waiting for it if need be."""
        found: list[dict[str, Any]] = []

        def arrived(_: Receiver) -> bool:
            found[:] = [event for event in self.events() if predicate(event)]
            return bool(found)

        assert self.wait_for(arrived, timeout), f"no matching webhook within {timeout:g} s: {self.events()}"
        return found[0]

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("content-length", "0")))
        with self._changed:
            reply = self.replies.popleft() if self.replies else Reply()
        verified = verify(self.key, handler.headers, body) if self.key is not None else None
        request = Request(
            id=handler.headers.get("webhook-id"),
            timestamp=handler.headers.get("webhook-timestamp"),
            signature=handler.headers.get("webhook-signature"),
            body=body,
            verified=verified,
            status=None if reply.hang else reply.status,
            headers={key.lower(): value for key, value in handler.headers.items()},
            path=handler.path,
        )
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
        if reply.hang:
            self._release.wait(HANG_LIMIT)
            handler.close_connection = True
            return
        # A body that fails the signature check is refused, as a real receiver would.
        status = 401 if verified is False else reply.status
        request.status = status
        try:
            handler.send_response(status)
            for key, value in reply.headers.items():
                handler.send_header(key, value)
            handler.send_header("content-length", "0")
            handler.end_headers()
        except OSError:
            return  # the sender gave up on us
        with self._changed:
            if 200 <= status < 300 and request.id is not None:
                self.delivered[request.id] += 1
            self._changed.notify_all()
