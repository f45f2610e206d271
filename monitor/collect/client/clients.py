"""HTTP clients kept across polls: one per server, each with its own small keep-alive pool.

A new httpx client per poll costs its construction and a TCP (and TLS) connect on every poll.
Kept clients reuse the server's connection from one poll to the next when the server keeps it
open, and share the process's one TLS context. Each server gets its own client, so a pool never
scans thousands of connections to find the one for its origin, and a server's headers and
timeout stay its own.

A client outlives the poll that made it, while the response hook and the host-policy refusal
belong to one poll: the client calls them through `LISTENER`, a context variable each poll sets
in its own task before the transport starts (the transport's tasks inherit it).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx2

from monitor.collect.client.http import media_type, new_client
from monitor.collect.client.target import Limits, Target
from monitor.core.hosts import HostPolicy
from monitor.core.states import ServerOrigin


@dataclass(frozen=True)
class Listener:
    """What one poll wants to hear from the kept client it is using."""

    on_response: Callable[[httpx2.Response], Awaitable[None]]
    on_refused: Callable[[str], None]


LISTENER: contextvars.ContextVar[Listener | None] = contextvars.ContextVar(
    "drift_monitor_listener", default=None
)


DRAINED = 4096
"""Bodies up to this size that the SDK leaves unread (a 202 to a notification, the answer to DELETE)
are read here: httpcore closes a connection whose last response was not read to its end, which
would cost every poll a new connection."""


async def _dispatch_response(response: httpx2.Response) -> None:
    listener = LISTENER.get()
    if listener is not None:
        await listener.on_response(response)
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) <= DRAINED and media_type(response) != "text/event-stream":
        await response.aread()


def _dispatch_refusal(reason: str) -> None:
    listener = LISTENER.get()
    if listener is not None:
        listener.on_refused(reason)


ClientKey = tuple[str, tuple[tuple[str, str], ...], float, tuple[str, ...] | None]


class HttpClients:
    """The kept Streamable HTTP clients of one event loop, by server name.

    `keepalive` is how long an idle connection is kept: longer than the poll interval, so the next
    poll finds it (a server that closes idle connections sooner simply gets a new one).
    """

    def __init__(self, keepalive: float) -> None:
        self.keepalive = keepalive
        self._clients: dict[str, tuple[ClientKey, httpx2.AsyncClient]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def client(self, target: Target, limits: Limits) -> httpx2.AsyncClient:
        """The server's kept client, made anew when its URL, headers, timeout or policy changed."""
        assert target.url is not None
        checked = target.origin == ServerOrigin.API
        key: ClientKey = (
            target.url,
            tuple(sorted(target.request_headers.items())),
            limits.timeout,
            limits.allowed_hosts if checked else None,
        )
        kept = self._clients.get(target.name)
        if kept is not None and kept[0] == key:
            return kept[1]
        if kept is not None:
            self._close_later(kept[1])
        client = new_client(
            target.request_headers,
            httpx2.Timeout(limits.timeout),
            None,
            event_hooks={"response": [_dispatch_response]},
            policy=HostPolicy(limits.allowed_hosts) if checked else None,
            on_refused=_dispatch_refusal,
            limits=httpx2.Limits(
                max_connections=4, max_keepalive_connections=1, keepalive_expiry=self.keepalive
            ),
        )
        self._clients[target.name] = (key, client)
        return client

    def forget(self, name: str) -> bool:
        """Drop a server's kept client (after a connection failure); whether there was one.

        A server may close an idle connection just as a poll sends on it, which fails that poll
        though the server is fine: the poller retries a connection failure once on a new client.
        """
        kept = self._clients.pop(name, None)
        if kept is not None:
            self._close_later(kept[1])
        return kept is not None

    def __len__(self) -> int:
        return len(self._clients)

    def _close_later(self, client: httpx2.AsyncClient) -> None:
        task = asyncio.get_running_loop().create_task(client.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every kept client and its connections."""
        clients = [client for _, client in self._clients.values()]
        self._clients.clear()
        await asyncio.gather(*(c.aclose() for c in clients), *self._closing, return_exceptions=True)
