"""Group commit on the store-writer thread: unchanged polls recorded in batches.

Polls finish on the event loop one by one; each waits here while the polls finished in the same
short window (or while the writer is busy with the previous batch) join it, and the whole batch
is recorded in one transaction by `monitor.store.batch.record_unchanged`. A poll whose listing
changed, or any poll of a batch that failed as a whole, comes back as None for the poller to
record in its own transaction, so one bad row never costs other servers their poll.

A poll's `poll_one` returns only once its batch has committed: what follows a poll (alerting,
printing, freeing the scheduler's slot) never acts on something not yet recorded.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor

from monitor.store import PollOutcome, Store
from monitor.store.batch import record_unchanged
from monitor.store.polled import SuccessfulPoll

log = logging.getLogger("drift_monitor.poller")

WINDOW = 0.02
"""Seconds a batch stays open for more polls once its first one arrived."""
MAX_BATCH = 500
"""Polls per transaction at most."""

Waiting = tuple[SuccessfulPoll, "asyncio.Future[PollOutcome | None]"]


class GroupCommit:
    def __init__(self, store: Store, writer: Executor, *, window: float = WINDOW, max_batch: int = MAX_BATCH):
        self.store = store
        self.writer = writer
        self.window = window
        self.max_batch = max_batch
        self._waiting: list[Waiting] = []
        self._flusher: asyncio.Task[None] | None = None

    async def record(self, poll: SuccessfulPoll) -> PollOutcome | None:
        """The poll's outcome once its batch committed, or None when it must be recorded on its own."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PollOutcome | None] = loop.create_future()
        self._waiting.append((poll, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        """Record batches until nobody waits; the task ends then, and the next poll starts another."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            if len(self._waiting) < self.max_batch:
                await asyncio.sleep(self.window)
            batch = self._waiting[: self.max_batch]
            del self._waiting[: self.max_batch]
            polls = [poll for poll, _ in batch]
            outcomes: list[PollOutcome | None] = [None] * len(polls)
            try:
                outcomes = await loop.run_in_executor(self.writer, record_unchanged, self.store, polls)
            except Exception:
                log.warning(
                    "a batch of %d polls failed; recording each on its own", len(polls), exc_info=True
                )
            finally:  # even cancelled, no poll is left waiting: unrecorded ones are recorded on their own
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if not future.done():  # its poll may have been cancelled meanwhile
                        future.set_result(outcome)
