"""Webhook receivers that fail in every way at once, through one running `Deliverer`.

What must hold: each failed attempt is recorded (status or error) and retried with the same
`webhook-id`, honouring Retry-After; every delivery ends delivered exactly once per webhook-id as the
receiver counts them; a receiver that hangs or hangs up holds up only its own delivery; every
request carries a signature that an independent check (tests/support/receiver.py) accepts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker
from support import Receiver, Reply, Request, verify, webhook_secret

from monitor.notify.delivery import Deliverer
from monitor.notify.outbox import enqueue, wake_after_commit
from monitor.sinks.base import WebhookConfig
from monitor.store.models import DeliveryAttempt, WebhookDelivery

SECRET_ENV = "FAULTS_WEBHOOK_SECRET"
KEY = b"fault-suite signing key, 32 byte"
SECRET = webhook_secret(KEY)
HANG_UP = Reply(status=0)
"""Read the request, then close the connection without answering."""
SEND_TIMEOUT = 3.0
"""Long next to a loopback send (milliseconds), so what finishes before a hanging send times out
does so on a busy machine too."""
WAIT = 30.0


class HangingUpReceiver(Receiver):
    """The shared test receiver, plus HANG_UP replies: the request is read (and counted as received,
    as a receiver that processed it and crashed before answering would), no answer is sent."""

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        with self._changed:
            hang_up = bool(self.replies) and self.replies[0] is HANG_UP
            if hang_up:
                self.replies.popleft()
        if not hang_up:
            super()._handle(handler)
            return
        body = handler.rfile.read(int(handler.headers.get("content-length", "0")))
        with self._changed:
            self.requests.append(
                Request(
                    id=handler.headers.get("webhook-id"),
                    timestamp=handler.headers.get("webhook-timestamp"),
                    signature=handler.headers.get("webhook-signature"),
                    body=body,
                    verified=verify(KEY, handler.headers, body),
                    status=None,
                )
            )
            self._changed.notify_all()
        handler.close_connection = True


@pytest.fixture
def receivers(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, HangingUpReceiver]]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    replies = {
        "flaky": [Reply(500), Reply(502)],
        "throttled": [Reply(429, {"Retry-After": "1"})],
        "hanging": [Reply(hang=True)],
        "hangs-up": [HANG_UP],
        "healthy": [],
    }
    running: dict[str, HangingUpReceiver] = {}
    try:
        for name, queued in replies.items():
            receiver = HangingUpReceiver(KEY)
            receiver.start()
            receiver.replies.extend(queued)
            running[name] = receiver
        yield running
    finally:
        for receiver in running.values():
            receiver.stop()


async def test_failing_receivers_are_retried_until_delivered_once(
    engine: Engine, receivers: dict[str, HangingUpReceiver]
) -> None:
    """Five receivers: 500 then 502, 429 with Retry-After: 1, one that hangs past the send timeout,
    one that reads the body and hangs up, and a healthy one; two deliveries each, all due at once.
    Must hold: all ten are delivered, each id answered 2xx exactly once; the attempts table has every
    failure with its status or error, in order; the 429 retry waits at least its Retry-After; the
    healthy receiver's deliveries, and the second delivery to the hanging receiver, are not held
    behind the hanging send (the deliverer's own records show them finished before it timed out)."""
    hooks = [WebhookConfig(name=name, url=r.url, secret_env=SECRET_ENV) for name, r in receivers.items()]
    deliverer = Deliverer(
        engine, hooks, timeout=SEND_TIMEOUT, backoff_base=0.05, backoff_cap=2.0, idle_poll=0.2
    )
    stop = asyncio.Event()
    task = asyncio.create_task(deliverer.run(stop))
    ids: dict[str, list[str]] = {}
    try:
        sessions = sessionmaker(engine, expire_on_commit=False)
        with sessions() as session, session.begin():
            for hook in hooks:
                ids[hook.name] = [
                    enqueue(session, hook, {"type": "alert.opened", "n": n}, alert_id=None, now=_now()).id
                    for n in range(2)
                ]
            wake_after_commit(session, deliverer.notify)
        for name, receiver in receivers.items():
            assert await asyncio.to_thread(receiver.wait_delivered, 2, WAIT), (name, receiver.requests)
    finally:
        stop.set()
        await task

    for name, receiver in receivers.items():
        assert receiver.delivered == dict.fromkeys(ids[name], 1), name
        assert {r.id for r in receiver.requests} == set(ids[name]), name
        assert all(r.verified for r in receiver.requests), name

    with Session(engine) as session:
        rows = {row.id: row for row in session.scalars(select(WebhookDelivery))}
        tried: dict[str, list[DeliveryAttempt]] = {}
        for attempt in session.scalars(select(DeliveryAttempt).order_by(DeliveryAttempt.id)):
            tried.setdefault(attempt.delivery_id, []).append(attempt)
    assert {row.state for row in rows.values()} == {"delivered"}
    assert all(row.lease_owner is None and row.attempts == len(tried[i]) for i, row in rows.items())

    def outcomes(name: str) -> list[list[tuple[int | None, str | None]]]:
        """Each of the webhook's two deliveries' attempts, the one that met the fault first."""
        runs = [[(a.status_code, a.error) for a in tried[i]] for i in ids[name]]
        assert all(run[-1] == (200, None) for run in runs), (name, runs)
        return sorted(runs, key=len, reverse=True)

    assert sorted(a for run in outcomes("flaky") for a in run[:-1]) == [(500, "HTTP 500"), (502, "HTTP 502")]
    assert outcomes("throttled") == [[(429, "HTTP 429"), (200, None)], [(200, None)]]
    assert outcomes("hanging") == [[(None, "TimeoutError"), (200, None)], [(200, None)]]
    (hung_up, _), other = outcomes("hangs-up")
    assert other == [(200, None)] and hung_up[0] is None and hung_up[1]
    assert "Disconnected" in hung_up[1] or "disconnected" in hung_up[1], hung_up
    assert outcomes("healthy") == [[(200, None)], [(200, None)]]

    def finished(attempt: DeliveryAttempt) -> float:
        return attempt.attempted_at.timestamp() + attempt.latency_ms / 1000

    for name in ("throttled", "hanging", "hangs-up"):
        failing, through = sorted(ids[name], key=lambda i: -len(tried[i]))
        first = tried[failing][0]
        if name == "throttled":
            gap = tried[failing][1].attempted_at - first.attempted_at
            assert gap.total_seconds() >= 1.0, ("Retry-After: 1 not honoured", gap)
        if name == "hanging":
            assert first.latency_ms >= SEND_TIMEOUT * 1000 * 0.9
            timed_out = finished(first)
            assert finished(tried[through][0]) < timed_out, (
                "the second delivery to a hanging receiver waited for the first"
            )
            healthy = [finished(tried[i][0]) for i in ids["healthy"]]
            assert max(healthy) < timed_out, "the healthy receiver's deliveries waited for the hanging send"
    # The hung-up body reached the receiver, and so did its repeat, under the same webhook-id:
    # a receiver that processed it before crashing can drop the repeat.
    seen = [r.id or "" for r in receivers["hangs-up"].requests]
    assert sorted(seen) == sorted([*ids["hangs-up"], _id_of(receivers["hangs-up"])])


def _id_of(receiver: Receiver) -> str:
    """The webhook-id of the request the receiver hung up on."""
    return next(r.id or "" for r in receiver.requests if r.status is None)


def _now() -> datetime:
    return datetime.now(UTC)
