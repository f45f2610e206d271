"""The decision lane: a decision is answered in bounded time, whatever else the process is doing.

A host runs the tool when its hook does not answer in time (Claude Code's HTTP hook: 5 s, as
docs/approvals.md configures it), and `serve` answers decisions on the same event loop that polls
and serves pages. So a burst of calls must not queue past that time, and polling or pages must
not starve it (docs/approvals.md, "Under load"):

- **Admission.** At most `[decisions] at_once` decision requests are being read, identified,
  decided and answered at a time; the others wait, in order of arrival, doing nothing (so the
  ones being decided are not slowed by a thousand others' steps on the loop). One that gets no
  slot within `[decisions] max_wait` seconds of its arrival, or arrives while `max_waiting` wait
  already, is answered by `Admission`, the outermost middleware after the security headers,
  before its caller is identified or its route found: a host hook gets its host's fail-closed
  answer (`ask`, or `deny` under `stale_decision = "deny"`; never `allow`, never an error status,
  which a host takes as "run it"), the decision API a 503 with `Retry-After`. Such an answer costs
  the loop a fraction of what a decision does, so a burst is answered in bounded time instead of
  queueing past the host's timeout. One that the lane's recent pace says would wait past
  `max_wait` (the waiters ahead of it, times how long an admitted request has held its slot of
  late, over the slots) is answered so at once, instead of after waiting for nothing: under a burst,
  the calls that cannot be decided in time get their answer as soon as they are read, and the tail
  of the burst no longer waits `max_wait` on top of the time it took to read it. Those that queued
  before there was a pace (the first burst after the start) are answered so when a slot given back
  brings one (`_trim`, at most every `TRIM_EVERY` seconds).
- **Its own threads.** Decisions run on the lane's few threads, not on the request threads that
  pages and the other API routes share, so no page waits in front of a decision.

Every answer given without deciding is counted (`drift_monitor_decisions_unanswered_total`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from prometheus_client.core import CounterMetricFamily, Metric
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PACE_WEIGHT = 0.2
"""The weight of the newest hold time in the lane's moving average of them."""
TRIM_EVERY = 0.1
"""Seconds between two passes over the waiting requests with the lane's pace (each one is O(queue))."""

THREADS = 4
"""Threads deciding at once: a decision is one indexed read and Python, so more threads would
only take turns at the interpreter lock. With `[decisions] refresh_on_decision`, a decision may
wait for a poll (up to `refresh_wait`), so then every admitted request gets a thread (`at_once`)."""

P = ParamSpec("P")
T = TypeVar("T")


class DecisionLane:
    """One per web app (`app.state.decision_lane`): the admission slots and queue, the deadline, the
    threads. The slots and the queue are the event loop's alone (no lock): only `Admission` uses them."""

    def __init__(self, at_once: int, max_waiting: int, max_wait: float, threads: int = THREADS) -> None:
        self.at_once = at_once
        self.threads = min(threads, at_once)
        self.max_waiting = max_waiting
        self.max_wait = max_wait
        self.free = at_once
        """Slots free: requests may be read, identified, decided and answered this many at a time."""
        self.waiting: deque[tuple[asyncio.Future[bool], float]] = deque()
        """Requests waiting for a slot, oldest first, with their deadlines (one answered already stays
        until it is skipped)."""
        self.queued = 0
        self.refused = 0
        """Answered at once because `max_waiting` requests were already waiting."""
        self.late = 0
        """Answered without deciding because no slot came free within `max_wait`."""
        self.hopeless = 0
        """Answered at once without deciding: at the lane's pace, no slot would come free in time."""
        self.hold: float | None = None
        """How long an admitted request holds its slot, a moving average (seconds; None: none yet)."""
        self._trimmed = -TRIM_EVERY
        self._lock = threading.Lock()
        self._threads: ThreadPoolExecutor | None = None

    async def enter(self, deadline: float) -> bool:
        """A slot for one request (True), or False at `deadline` (`time.monotonic()`) or at once when
        the queue is full. A True caller must `leave()`."""
        if self.free > 0 and self.queued == 0:
            self.free -= 1
            return True
        if self.queued >= self.max_waiting:
            self.refused += 1
            return False
        now = time.monotonic()
        if self.hold is not None and (self.queued + 1) * self.hold / self.at_once > deadline - now:
            self.hopeless += 1
            return False
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[bool] = loop.create_future()
        self.waiting.append((turn, deadline))
        self.queued += 1
        timer = loop.call_later(max(0.0, deadline - now), self._give_up, turn)
        try:
            admitted = await turn
        except asyncio.CancelledError:
            if not turn.done():
                turn.cancel()
            if turn.cancelled():  # still counted as waiting; `leave` skips it
                self.queued -= 1
            elif turn.result():
                self.leave()  # a slot handed over as the request was cancelled: pass it on
            raise
        finally:
            timer.cancel()
        return admitted

    def _give_up(self, turn: asyncio.Future[bool]) -> None:
        if not turn.done():
            self.queued -= 1
            self.late += 1
            turn.set_result(False)

    def _trim(self, now: float) -> None:
        """Answer now the waiters that, at the lane's pace, no slot would reach before their deadlines:
        those queued before the pace was known (the start of the first burst), or before it slowed."""
        assert self.hold is not None
        step, ahead = self.hold / self.at_once, 0
        for turn, deadline in self.waiting:
            if turn.done():
                continue
            if now + (ahead + 1) * step > deadline:
                self.queued -= 1
                self.hopeless += 1
                turn.set_result(False)
            else:
                ahead += 1

    def leave(self, held: float | None = None) -> None:
        """A slot back: to the oldest request still waiting, else free. `held`: for how long (seconds),
        the lane's pace."""
        if held is not None:
            self.hold = held if self.hold is None else self.hold + PACE_WEIGHT * (held - self.hold)
            now = time.monotonic()
            if now - self._trimmed >= TRIM_EVERY and self.queued:
                self._trimmed = now
                self._trim(now)
        while self.waiting:
            turn, _ = self.waiting.popleft()
            if not turn.done():
                self.queued -= 1
                turn.set_result(True)
                return
        self.free += 1

    async def run(self, decide: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`decide(*args, **kwargs)` on the lane's threads. An admitted request is always decided:
        at most `at_once` are, so it waits for a thread at most that many decisions' time."""
        call = functools.partial(decide, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._executor(), call)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.threads, thread_name_prefix="decisions")
            return self._threads

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "drift_monitor_decisions_unanswered",
            "Decision requests answered without deciding (a host hook's fail-closed answer, the "
            "decision API's 503), by why: too many in the process at once, waited past max_wait, or "
            "would have, at the lane's recent pace.",
            labels=["why"],
        )
        family.add_metric(["max-waiting"], self.refused)
        family.add_metric(["max-wait"], self.late)
        family.add_metric(["expected-wait"], self.hopeless)
        return [family]


class Admission:
    """The lane's door: a request to one of `answers`' paths is admitted while fewer than
    `max_waiting` are in flight, and otherwise answered at once by its path's answer (given the
    request's body, read up to `limit` bytes; a larger one is answered as an empty one)."""

    def __init__(
        self, app: ASGIApp, lane: DecisionLane, answers: Mapping[str, Callable[[bytes], ASGIApp]], limit: int
    ) -> None:
        self.app = app
        self.lane = lane
        self.answers = answers
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = self.answers.get(str(scope.get("path", ""))) if scope["type"] == "http" else None
        if answer is None:
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        if not await self.lane.enter(arrived + self.lane.max_wait):
            body, complete = await read_within(receive, self.limit)
            await answer(body if complete else b"")(scope, _nothing, send)
            return
        admitted = time.monotonic()
        try:
            await self.app(scope, receive, send)
        finally:
            self.lane.leave(time.monotonic() - admitted)


async def read_within(receive: Receive, limit: int, declared: bytes = b"") -> tuple[bytes, bool]:
    """The request's body and True, or what was read of it and False once it is over `limit` bytes
    (by its Content-Length, `declared`, before reading anything, or by counting; what is left is not
    read). The lane's busy answers and the decision path (`monitor.approvals.fastpath`) read so."""
    if declared.isdigit() and int(declared) > limit:
        return b"", False
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            return b"".join(chunks), False
        if not message.get("more_body", False):
            return b"".join(chunks), True


async def _nothing() -> Message:
    return {"type": "http.disconnect"}
