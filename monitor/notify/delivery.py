"""Sending due deliveries: several processes may share one PostgreSQL outbox.

Sending happens in its own task, one task per delivery, so a dead or slow receiver delays neither
polling nor other deliveries.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import httpx
from sqlalchemy import ColumnElement, Engine, and_, case, or_, select
from sqlalchemy.orm import Session, aliased, sessionmaker

from monitor.config import Config
from monitor.core.states import AlertEvent, AlertState, DeliveryState
from monitor.core.text import make_visible
from monitor.metrics import DELIVERIES
from monitor.notify.outbox import backoff_delay, parse_retry_after
from monitor.sinks import sink_for
from monitor.sinks.base import WebhookConfig, clip
from monitor.store.models import Alert, DeliveryAttempt, WebhookDelivery

if TYPE_CHECKING:
    import anyio

    from monitor.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Claim:
    id: str
    webhook: str
    body: str


@dataclass(frozen=True)
class _Result:
    attempted_at: datetime
    status: int | None
    latency_ms: float
    error: str | None
    retry_after: float | None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def refused(self) -> bool:
        """A 4xx other than 408 (timeout) and 429 (too many requests): the receiver will refuse this
        body however often it is sent (PagerDuty says not to retry its 400s)."""
        return self.status is not None and 400 <= self.status < 500 and self.status not in (408, 429)


class Deliverer:
    """Sends due deliveries. Several processes may share one PostgreSQL outbox.

    A claim takes rows with `FOR UPDATE SKIP LOCKED` (so concurrent claimers never block on or take
    each other's rows) and writes a lease, so a row being sent is not claimed again until the
    lease runs out; a process that dies mid-send simply lets its lease expire.
    """

    def __init__(
        self,
        engine: Engine,
        webhooks: Sequence[WebhookConfig],
        *,
        owner: str | None = None,
        timeout: float = 10.0,
        lease: float = 60.0,
        backoff_base: float = 1.0,
        backoff_cap: float = 600.0,
        concurrency: int = 16,
        idle_poll: float = 5.0,
    ) -> None:
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self.sinks = {webhook.name: sink_for(webhook) for webhook in webhooks}
        self.owner = owner or f"deliverer-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.lease = timedelta(seconds=lease)
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.concurrency = concurrency
        self.idle_poll = idle_poll
        """Also how soon rows enqueued by other processes, or leases they left behind, are noticed."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    @classmethod
    def from_config(cls, store: Store, config: Config, owner: str) -> Deliverer:
        return cls(store.engine, config.webhooks, owner=owner)

    def notify(self) -> None:
        """Wake the running loop now; safe from any thread (polls commit in worker threads)."""
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing runs to wake
            loop.call_soon_threadsafe(wake.set)

    async def deliver_due(self) -> int:
        """One pass: attempt every due delivery (up to `concurrency`) and wait for the outcomes.

        Returns how many it attempted or settled without sending (expired, superseded): while that is
        not 0, another pass may find deliveries those were holding back.
        """
        async with self._transport() as transport:
            settled: list[int] = []
            claims = await asyncio.to_thread(self._claim, self.concurrency, settled)
            await asyncio.gather(*(self._attempt(transport, claim) for claim in claims))
        return len(claims) + sum(settled)

    async def run(self, stop: anyio.Event | asyncio.Event) -> None:
        """Deliver until `stop` is set, then let in-flight sends finish (each is bounded by `timeout`).

        Cancelled instead, it abandons them and releases their leases for the next process.
        """
        self._loop = asyncio.get_running_loop()
        wake = self._wake = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        def finished(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            wake.set()

        stopped = asyncio.ensure_future(stop.wait())
        try:
            async with self._transport() as transport:
                while not stop.is_set():
                    wake.clear()
                    delay = self.idle_poll
                    try:
                        free = self.concurrency - len(tasks)
                        if free > 0:
                            for claim in await asyncio.to_thread(self._claim, free):
                                task = asyncio.create_task(self._attempt(transport, claim), name=claim.id)
                                tasks.add(task)
                                task.add_done_callback(finished)
                        if len(tasks) < self.concurrency:
                            delay = await asyncio.to_thread(self._seconds_until_due)
                    except Exception:
                        log.exception("webhook outbox unavailable; trying again in %.0f s", self.idle_poll)
                    woken = asyncio.ensure_future(wake.wait())
                    await asyncio.wait({stopped, woken}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
                    woken.cancel()
                if tasks:
                    await asyncio.wait(set(tasks))
        finally:
            stopped.cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop = self._wake = None

    def _transport(self) -> httpx.AsyncHTTPTransport:
        """httpx's transport rather than its client: the client logs each request URL, and a webhook
        URL can be a secret (Slack's are)."""
        return httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=self.concurrency))

    def _claim(self, limit: int, settled: list[int] | None = None) -> list[_Claim]:
        """Lease up to `limit` due deliveries in order (`_in_order`), and expire the pending ones past
        their expiry; a re-post leaves out the alerts resolved since it was queued."""
        now = _utcnow()
        lease_free = or_(WebhookDelivery.lease_expires_at.is_(None), WebhookDelivery.lease_expires_at <= now)
        ours = WebhookDelivery.webhook.in_(list(self.sinks))
        with self.sessions.begin() as session:
            rows = session.scalars(
                select(WebhookDelivery)
                .where(
                    WebhookDelivery.state == DeliveryState.PENDING,
                    lease_free,
                    or_(
                        WebhookDelivery.expires_at <= now,
                        and_(ours, WebhookDelivery.next_attempt_at <= now, _in_order(now)),
                    ),
                )
                .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.created_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            claims = []
            for row in rows:
                if row.expires_at <= now:
                    row.state = DeliveryState.EXPIRED
                    DELIVERIES.labels(row.webhook, "expired").inc()
                    log.warning("webhook %s: delivery %s expired undelivered", row.webhook, row.id)
                elif row.event_type == AlertEvent.FIRING and not self._still_firing(session, row):
                    pass
                else:
                    row.lease_owner = self.owner
                    row.lease_expires_at = now + self.lease
                    claims.append(_Claim(row.id, row.webhook, row.body))
                    continue
                if settled is not None:
                    settled.append(1)
            return claims

    def _still_firing(self, session: Session, row: WebhookDelivery) -> bool:
        """Drop from a re-post the alerts resolved since it was queued: sent after their resolution,
        they would fire again at the receiver. False when none is left (the re-post is superseded)."""
        sink = self.sinks[row.webhook]
        carried = sink.reposted_alerts(row.body)
        resolved = set(
            session.scalars(
                select(Alert.id).where(Alert.id.in_(carried), Alert.state == AlertState.RESOLVED)
            ).all()
        )
        if not resolved:
            return True
        if resolved >= set(carried):
            row.state = DeliveryState.SUPERSEDED
            log.debug("webhook %s: re-post %s superseded: its alerts were resolved", row.webhook, row.id)
            return False
        row.body = sink.without(row.body, resolved)
        return True

    def _seconds_until_due(self) -> float:
        now = _utcnow()
        with self.sessions() as session:
            due = session.scalar(
                select(WebhookDelivery.next_attempt_at)
                .where(
                    WebhookDelivery.state == DeliveryState.PENDING,
                    WebhookDelivery.webhook.in_(list(self.sinks)),
                    or_(WebhookDelivery.lease_expires_at.is_(None), WebhookDelivery.lease_expires_at <= now),
                    _in_order(now),  # one held back is due when what holds it back is settled
                )
                .order_by(WebhookDelivery.next_attempt_at)
                .limit(1)
            )
        if due is None:
            return self.idle_poll
        return min(self.idle_poll, max(0.0, (due - now).total_seconds()))

    async def _attempt(self, transport: httpx.AsyncHTTPTransport, claim: _Claim) -> None:
        sink = self.sinks[claim.webhook]
        webhook = sink.webhook
        attempted_at = _utcnow()
        started = time.perf_counter()
        status: int | None = None
        error: str | None = None
        retry_after: float | None = None
        try:
            content, headers = sink.request(claim.id, claim.body, int(time.time()))
            request = httpx.Request(
                "POST",
                webhook.url,
                content=content,
                headers=headers,
                extensions={"timeout": httpx.Timeout(self.timeout).as_dict()},
            )
            words = ""
            async with asyncio.timeout(self.timeout):
                response = await transport.handle_async_request(request)
                try:  # a refusal's first bytes say why; a receiver cannot make us buffer more
                    if not 200 <= response.status_code < 300:
                        words = await _first_words(response)
                finally:
                    await response.aclose()
            status = response.status_code
            if status in (429, 503):
                retry_after = parse_retry_after(response.headers.get("retry-after"), _utcnow())
        except asyncio.CancelledError:
            await asyncio.to_thread(self._release, claim.id)
            raise
        except Exception as exc:
            error = _describe(exc, webhook.url)
        if status is not None and not 200 <= status < 300:
            error = f"HTTP {status}: {words}" if words else f"HTTP {status}"
        result = _Result(attempted_at, status, (time.perf_counter() - started) * 1000, error, retry_after)
        try:
            state, delay = await asyncio.to_thread(self._record, claim, result)
        except Exception:
            log.exception(
                "webhook %s: could not record attempt of %s; its lease will run out", webhook.name, claim.id
            )
            return
        DELIVERIES.labels(webhook.name, "delivered" if result.ok else "failed").inc()
        if state == DeliveryState.EXPIRED:
            DELIVERIES.labels(webhook.name, "expired").inc()
        if result.ok:  # routine (Alertmanager re-posts come every minute): counted, logged at DEBUG
            log.debug("webhook %s: delivered %s in %.0f ms", webhook.name, claim.id, result.latency_ms)
        elif state == DeliveryState.PENDING and delay is not None:
            log.warning(
                "webhook %s: %s failed (%s); retrying in %.1f s",
                webhook.name,
                claim.id,
                error,
                delay,
                extra={"event": "delivery.failed", "webhook": webhook.name, "delivery_id": claim.id},
            )
        else:
            log.warning(
                "webhook %s: %s failed (%s); now %s",
                webhook.name,
                claim.id,
                error,
                state,
                extra={"event": "delivery.failed", "webhook": webhook.name, "delivery_id": claim.id},
            )

    def _record(self, claim: _Claim, result: _Result) -> tuple[str, float | None]:
        """Store the attempt and the delivery's next state; returns (state, seconds to the retry)."""
        with self.sessions.begin() as session:
            row = session.get(WebhookDelivery, claim.id, with_for_update=True)
            if row is None:
                return "gone", None
            session.add(
                DeliveryAttempt(
                    delivery_id=row.id,
                    attempted_at=result.attempted_at,
                    status_code=result.status,
                    latency_ms=result.latency_ms,
                    error=result.error,
                )
            )
            row.attempts += 1
            now = _utcnow()
            delay: float | None = None
            if result.ok:
                if row.state != DeliveryState.DELIVERED:
                    row.state, row.delivered_at, row.last_error = DeliveryState.DELIVERED, now, None
            elif row.state == DeliveryState.PENDING and row.lease_owner == self.owner and result.refused:
                row.state, row.last_error = DeliveryState.FAILED, result.error
            elif row.state == DeliveryState.PENDING and row.lease_owner == self.owner:
                row.last_error = result.error
                delay = backoff_delay(
                    row.attempts, result.retry_after, base=self.backoff_base, cap=self.backoff_cap
                )
                next_at = now + timedelta(seconds=delay)
                if next_at >= row.expires_at:
                    row.state = DeliveryState.EXPIRED
                else:
                    row.next_attempt_at = next_at
            if row.lease_owner == self.owner:
                row.lease_owner, row.lease_expires_at = None, None
            return row.state, delay

    def _release(self, delivery_id: str) -> None:
        with self.sessions.begin() as session:
            row = session.get(WebhookDelivery, delivery_id, with_for_update=True)
            if row is not None and row.lease_owner == self.owner:
                row.lease_owner, row.lease_expires_at = None, None


_RANKS = {AlertEvent.OPENED.value: 0, AlertEvent.ACKNOWLEDGED.value: 1, AlertEvent.RESOLVED.value: 2}
"""The order of an alert's events."""


def _in_order(now: datetime) -> ColumnElement[bool]:
    """Whether a pending delivery may go now, keeping each alert's events in order per receiver.

    An alert's events happen in one order (opened, acknowledged, resolved), so a delivery waits while
    the same receiver still has an earlier event of the same alert pending (a failed `opened` is
    retried before its `resolved` is sent, or the receiver would end up with the alert firing); and
    while a re-post to that receiver is pending, since one queued before an alert was resolved would
    otherwise reach the receiver after the resolution. Re-posts never wait: when one is claimed, the
    alerts resolved since are left out of it (`Deliverer._still_firing`). A delivery past its expiry
    holds nothing up.
    """
    earlier = aliased(WebhookDelivery)
    mine = case(_RANKS, value=WebhookDelivery.event_type, else_=3)
    theirs = case(_RANKS, value=earlier.event_type, else_=3)
    waits = (
        select(earlier.id)
        .where(
            earlier.webhook == WebhookDelivery.webhook,
            earlier.state == DeliveryState.PENDING,
            earlier.expires_at > now,
            earlier.id != WebhookDelivery.id,
            or_(
                earlier.event_type == AlertEvent.FIRING.value,
                and_(earlier.alert_id == WebhookDelivery.alert_id, theirs < mine),
            ),
        )
        .exists()
    )
    return or_(WebhookDelivery.event_type == AlertEvent.FIRING.value, ~waits)


WORDS_LIMIT = 2048
"""Bytes of a refusal's body kept as its reason."""


async def _first_words(response: httpx.Response) -> str:
    """What a receiver said with its refusal: the first `WORDS_LIMIT` bytes of the body, as one line
    of visible text (a receiver's body is not trusted: no control characters reach a log line)."""
    read = b""
    async for chunk in response.stream:  # type: ignore[union-attr]
        read += chunk
        if len(read) >= WORDS_LIMIT:
            break
    text = " ".join(read[:WORDS_LIMIT].decode("utf-8", "replace").split())
    return clip(make_visible(text), 500)


def _describe(exc: Exception, url: str) -> str:
    """The error for the attempts table and logs, with the URL (Slack's carries a secret) cut out."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    try:
        path = httpx.URL(url).raw_path.decode("ascii", "replace")
    except httpx.InvalidURL:
        path = ""
    for secret in (url, path):
        if len(secret) > 1:
            text = text.replace(secret, "<url>")
    return text[:500]


def _utcnow() -> datetime:
    return datetime.now(UTC)
