"""Webhook delivery against a real receiver on 127.0.0.1, on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session, sessionmaker
from support import Process, Receiver, Reply, webhook_secret

from monitor.notify.delivery import Deliverer
from monitor.notify.outbox import backoff_delay, enqueue, parse_retry_after, wake_after_commit
from monitor.sinks import render
from monitor.sinks.base import WebhookConfig
from monitor.sinks.signing import sign, signing_key
from monitor.sinks.slack import SlackWebhook
from monitor.store import make_engine
from monitor.store.models import DeliveryAttempt, WebhookDelivery

SECRET_ENV = "TEST_WEBHOOK_SECRET"
KEY = b"a 32-byte key for the test hook!"
SECRET = webhook_secret(KEY)
NEVER = 3600.0
"""An idle poll that never comes during a test: a delivery within the receiver's wait was woken."""


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    return SECRET


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(KEY) as running:
        yield running


def hook(url: str, name: str = "ops", **fields: Any) -> WebhookConfig:
    return WebhookConfig(name=name, url=url, secret_env=SECRET_ENV, **fields)


def add(
    engine: Engine, webhook: WebhookConfig, n: int = 1, *, now: datetime | None = None, **kw: Any
) -> list[str]:
    """Commit `n` pending deliveries, as an alert's transaction would."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        rows = [
            enqueue(
                session, webhook, {"type": "alert.opened", "n": i}, alert_id=None, now=now or utcnow(), **kw
            )
            for i in range(n)
        ]
    return [row.id for row in rows]


def utcnow() -> datetime:
    return datetime.now(UTC)


def delivery(engine: Engine, delivery_id: str) -> WebhookDelivery:
    with Session(engine) as session:
        return session.get_one(WebhookDelivery, delivery_id)


def attempts(engine: Engine, delivery_id: str) -> list[DeliveryAttempt]:
    with Session(engine) as session:
        return list(
            session.scalars(
                select(DeliveryAttempt)
                .where(DeliveryAttempt.delivery_id == delivery_id)
                .order_by(DeliveryAttempt.id)
            )
        )


def make_due(engine: Engine, delivery_id: str) -> None:
    """Skip the backoff wait: the schedule was asserted, the test need not sit through it."""
    with engine.begin() as connection:
        connection.execute(
            update(WebhookDelivery).where(WebhookDelivery.id == delivery_id).values(next_attempt_at=utcnow())
        )


def test_signature_matches_the_standard_webhooks_test_vector() -> None:
    key = signing_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
    signature = sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}')
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert signing_key("plain secret") == b"plain secret"
    with pytest.raises(ValueError) as error:
        signing_key("whsec_not base64 at all!")
    assert "not base64 at all" not in str(error.value)


async def test_delivery_is_signed_sent_once_and_recorded(
    engine: Engine, receiver: Receiver, secret: str
) -> None:
    (delivery_id,) = add(engine, hook(receiver.url))
    deliverer = Deliverer(engine, [hook(receiver.url)])
    assert await deliverer.deliver_due() == 1
    assert await deliverer.deliver_due() == 0

    (request,) = receiver.requests
    assert request.verified is True
    assert request.id == delivery_id and request.id.startswith("msg_")
    assert request.headers["content-type"] == "application/json"
    row = delivery(engine, delivery_id)
    assert request.body == row.body.encode() and json.loads(request.body) == {"type": "alert.opened", "n": 0}
    assert (row.state, row.attempts, row.lease_owner) == ("delivered", 1, None)
    assert row.delivered_at is not None
    (attempt,) = attempts(engine, delivery_id)
    assert (attempt.status_code, attempt.error) == (200, None) and attempt.latency_ms > 0


async def test_without_a_secret_deliveries_are_unsigned(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with Receiver(key=None) as receiver:
        (delivery_id,) = add(engine, hook(receiver.url))
        assert await Deliverer(engine, [hook(receiver.url)]).deliver_due() == 1
    (request,) = receiver.requests
    assert request.signature is None and receiver.delivered == {delivery_id: 1}
    assert request.id == delivery_id and request.timestamp and abs(int(request.timestamp) - time.time()) < 60


def test_backoff_is_exponential_with_full_jitter_and_retry_after_as_a_floor() -> None:
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (5, 16.0), (11, 600.0), (10_000, 600.0)]:
        delays = [backoff_delay(attempt, None, base=1.0, cap=600.0) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays) and max(delays) > ceiling / 2
    assert all(backoff_delay(1, 30.0, base=1.0, cap=600.0) >= 30.0 for _ in range(50))
    assert backoff_delay(1, 86_400.0, base=1.0, cap=600.0) == 600.0, "Retry-After is honoured up to the cap"
    now = utcnow()
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=90), usegmt=True), now) == pytest.approx(
        90, abs=1
    )
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None


async def test_retries_reuse_the_id_back_off_and_honour_retry_after(
    engine: Engine, receiver: Receiver, secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(random, "uniform", lambda low, high: high)  # jitter at its ceiling
    receiver.replies.extend([Reply(500), Reply(429, {"Retry-After": "120"})])
    (delivery_id,) = add(engine, hook(receiver.url))
    deliverer = Deliverer(engine, [hook(receiver.url)], backoff_base=30.0)

    before = utcnow()
    assert await deliverer.deliver_due() == 1
    row = delivery(engine, delivery_id)
    assert (row.state, row.attempts, row.last_error) == ("pending", 1, "HTTP 500")
    assert before + timedelta(seconds=30) <= row.next_attempt_at <= utcnow() + timedelta(seconds=30)
    assert await deliverer.deliver_due() == 0, "not due before its backoff"

    make_due(engine, delivery_id)
    assert await deliverer.deliver_due() == 1
    row = delivery(engine, delivery_id)
    assert (row.state, row.attempts, row.last_error) == ("pending", 2, "HTTP 429")
    assert row.next_attempt_at >= utcnow() + timedelta(seconds=119), "Retry-After (120) beats 30 * 2"

    make_due(engine, delivery_id)
    assert await deliverer.deliver_due() == 1
    assert delivery(engine, delivery_id).state == "delivered"
    assert [r.id for r in receiver.requests] == [delivery_id] * 3
    assert all(r.verified for r in receiver.requests), "each attempt is signed afresh"
    assert receiver.delivered == {delivery_id: 1}
    assert [(a.status_code, a.error) for a in attempts(engine, delivery_id)] == [
        (500, "HTTP 500"),
        (429, "HTTP 429"),
        (200, None),
    ]


async def test_a_receiver_that_is_down_then_back_gets_everything_once(
    engine: Engine, receiver: Receiver, secret: str
) -> None:
    receiver.stop()  # the port is closed now: connection refused
    webhook = hook(receiver.url)
    ids = add(engine, webhook, 3)
    deliverer = Deliverer(engine, [webhook], backoff_base=0.05, backoff_cap=0.2, idle_poll=0.5)
    assert await deliverer.deliver_due() == 3
    for delivery_id in ids:
        row = delivery(engine, delivery_id)
        assert row.state == "pending" and row.attempts == 1
        (attempt,) = attempts(engine, delivery_id)
        assert attempt.status_code is None and attempt.error and "Connect" in attempt.error

    receiver.start()  # same port
    stop = asyncio.Event()
    task = asyncio.create_task(deliverer.run(stop))
    try:
        assert await asyncio.to_thread(receiver.wait_delivered, 3)
    finally:
        stop.set()
        await task
    assert receiver.delivered == dict.fromkeys(ids, 1)
    assert {delivery(engine, i).state for i in ids} == {"delivered"}


async def test_deliveries_expire(engine: Engine, receiver: Receiver, secret: str) -> None:
    webhook = hook(receiver.url)
    (stale,) = add(engine, webhook, now=utcnow() - timedelta(hours=25))
    receiver.replies.append(Reply(503, {"Retry-After": "3600"}))
    (short,) = add(engine, webhook, expires_after=timedelta(minutes=1))
    deliverer = Deliverer(engine, [webhook])

    assert await deliverer.deliver_due() == 2, "one sent, and the stale one expired, not sent"
    assert delivery(engine, stale).state == "expired" and attempts(engine, stale) == []
    row = delivery(engine, short)
    assert (row.state, row.attempts, row.last_error) == ("expired", 1, "HTTP 503"), (
        "its retry lands past expiry"
    )
    assert await deliverer.deliver_due() == 0
    assert [r.id for r in receiver.requests] == [short]


async def test_a_restarted_deliverer_sends_what_was_pending(
    database_url: str, engine: Engine, receiver: Receiver, secret: str
) -> None:
    webhook = hook(receiver.url)
    first = make_engine(database_url)
    (delivery_id,) = add(first, webhook)
    first.dispose()  # the process that enqueued is gone

    restarted = make_engine(database_url)
    try:
        assert await Deliverer(restarted, [webhook]).deliver_due() == 1
    finally:
        restarted.dispose()
    assert receiver.delivered == {delivery_id: 1}


async def test_a_live_lease_is_respected_and_a_dead_one_runs_out(
    engine: Engine, receiver: Receiver, secret: str
) -> None:
    webhook = hook(receiver.url)
    (delivery_id,) = add(engine, webhook)
    with engine.begin() as connection:
        connection.execute(
            update(WebhookDelivery).values(
                lease_owner="other-process", lease_expires_at=utcnow() + timedelta(minutes=1)
            )
        )
    deliverer = Deliverer(engine, [webhook])
    assert await deliverer.deliver_due() == 0, "another process is sending it"
    with engine.begin() as connection:
        connection.execute(update(WebhookDelivery).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    assert await deliverer.deliver_due() == 1
    assert receiver.delivered == {delivery_id: 1}
    assert delivery(engine, delivery_id).lease_owner is None


async def test_concurrent_deliverers_never_send_one_delivery_twice(
    database_url: str, engine: Engine, receiver: Receiver, secret: str
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("several deliverers share an outbox only on PostgreSQL")
    webhook = hook(receiver.url)
    ids = add(engine, webhook, 40)
    engines = [make_engine(database_url) for _ in range(3)]
    try:
        deliverers = [Deliverer(e, [webhook], concurrency=20) for e in engines]
        counts: list[int] = []
        while sum(counts) < len(ids) and len(counts) < 30:
            counts += await asyncio.gather(*(d.deliver_due() for d in deliverers))
    finally:
        for e in engines:
            e.dispose()
    assert sum(counts) == len(ids)
    assert receiver.delivered == dict.fromkeys(ids, 1)
    assert len(receiver.requests) == len(ids)


async def test_enqueue_wakes_the_loop_and_a_slow_receiver_holds_only_its_own_delivery(
    engine: Engine, receiver: Receiver, secret: str
) -> None:
    with Receiver(KEY) as slow:
        slow.replies.append(Reply(hang=True))
        fast_hook, slow_hook = hook(receiver.url, "fast"), hook(slow.url, "slow")
        deliverer = Deliverer(engine, [fast_hook, slow_hook], idle_poll=NEVER, timeout=15.0, lease=30.0)
        stop = asyncio.Event()
        task = asyncio.create_task(deliverer.run(stop))
        try:
            sessions = sessionmaker(engine, expire_on_commit=False)
            with sessions() as session, session.begin():
                enqueue(session, slow_hook, {"type": "alert.opened"}, alert_id=None, now=utcnow())
                wake_after_commit(session, deliverer.notify)
            assert await asyncio.to_thread(slow.wait_received, 1)

            with sessions() as session, session.begin():
                fast_id = enqueue(
                    session, fast_hook, {"type": "alert.opened"}, alert_id=None, now=utcnow()
                ).id
                wake_after_commit(session, deliverer.notify)
            woken = await asyncio.to_thread(receiver.wait_delivered, 1)
            assert woken, "woken by the commit, not the idle poll"
            assert slow.requests[0].status is None, "the slow receiver is still holding its request"
            slow.release()
        finally:
            stop.set()
            await task
    assert receiver.delivered == {fast_id: 1}


async def test_errors_and_logs_carry_no_secret(
    engine: Engine, receiver: Receiver, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.stop()
    url = f"http://127.0.0.1:{receiver.port}/services/T0/B0/xoxb-secret-path-token"
    webhook = hook(url)
    (delivery_id,) = add(engine, webhook)
    with caplog.at_level(logging.DEBUG, logger="monitor.notify.delivery"):
        assert await Deliverer(engine, [webhook]).deliver_due() == 1
    (attempt,) = attempts(engine, delivery_id)
    stored = f"{attempt.error} {delivery(engine, delivery_id).last_error}"
    for text in (stored, caplog.text):
        assert "xoxb-secret-path-token" not in text
        assert secret.removeprefix("whsec_") not in text and "whsec_" not in text
    assert delivery_id in caplog.text


def test_slack_format_is_escaped_plain_text() -> None:
    payload = {
        "type": "alert.opened",
        "alert": {
            "id": 7,
            "rule": "read-only-revoked",
            "severity": "critical",
            "server": "docs",
            "tool": "<!channel> & <https://evil.example|click>",
            "message": "tool\u202e is <@U123> no longer read-only",
            "opened_at": "2026-01-01T00:00:00Z",
            "url": "http://127.0.0.1:8000/alerts/7",
        },
        "findings": [],
    }
    webhook = WebhookConfig(name="s", url="http://127.0.0.1/", format="slack")
    message = SlackWebhook.body(payload, webhook)
    assert set(message) == {"text", "blocks"}
    assert message["text"].startswith("[CRITICAL] read-only-revoked opened on docs / &lt;!channel&gt; &amp; ")
    texts = [message["text"], message["blocks"][0]["text"]["text"]]
    for text in texts:
        assert "<!channel>" not in text and "<@U123>" not in text and "<https://" not in text
        assert "\u202e" not in text and "&lt;U+202E&gt;" in text
    assert message["blocks"][1]["elements"][0]["text"] == "<http://127.0.0.1:8000/alerts/7|Alert 7>"
    body = render(webhook, payload)
    assert body.isascii() and json.loads(body) == message


SCRIPT = """
import asyncio, sys
from datetime import UTC, datetime
from sqlalchemy.orm import Session, sessionmaker
from monitor.sinks.base import WebhookConfig
from monitor.store import make_engine
from monitor.notify.delivery import Deliverer
from monitor.notify.outbox import enqueue

engine = make_engine(sys.argv[1])
webhook = WebhookConfig(name="ops", url=sys.argv[2], secret_env=sys.argv[3])
with Session(engine) as session, session.begin():
    delivery_id = enqueue(session, webhook, {"type": "alert.opened"}, alert_id=None, now=datetime.now(UTC)).id
print("ENQUEUED", delivery_id, flush=True)
asyncio.run(Deliverer(engine, [webhook], timeout=60.0, lease=1.0).deliver_due())
print("UNREACHABLE: the receiver never answers", flush=True)
"""


@pytest.mark.slow
async def test_a_process_killed_mid_send_loses_nothing(
    database_url: str, engine: Engine, receiver: Receiver, secret: str
) -> None:
    receiver.replies.append(Reply(hang=True))
    argv = [sys.executable, "-c", SCRIPT, database_url, receiver.url, SECRET_ENV]
    with Process(argv, env={**os.environ, SECRET_ENV: SECRET}) as child:
        delivery_id = (await asyncio.to_thread(child.wait_for, "ENQUEUED ")).split()[1]
        assert await asyncio.to_thread(receiver.wait_received, 1), child.output()
        assert child.kill() == -signal.SIGKILL
    receiver.release()
    row = delivery(engine, delivery_id)
    assert row.state == "pending" and row.lease_owner is not None, "killed holding the lease"

    deliverer = Deliverer(engine, [hook(receiver.url)], idle_poll=0.1)
    stop = asyncio.Event()
    task = asyncio.create_task(deliverer.run(stop))
    try:
        assert await asyncio.to_thread(receiver.wait_delivered, 1), "delivered once the dead lease ran out"
    finally:
        stop.set()
        await task
    assert [r.id for r in receiver.requests] == [delivery_id, delivery_id]
    assert receiver.delivered == {delivery_id: 1}
    assert all(r.verified for r in receiver.requests)
    row = delivery(engine, delivery_id)
    assert (row.state, row.attempts) == ("delivered", 1)
