"""Writes that must not hold up the request that causes them, made on a thread of their own.

A decision's trace or a refused attempt's audit event is written after the answer is sent: the
writer batches what arrives within `LINGER` of a batch's first item into one transaction (one write
lock on SQLite, one commit), and if the
batch fails, writes each item on its own so one bad item (a server deleted meanwhile) costs only
itself. At most `max_pending` items wait; past that they are dropped and counted (`dropped`), so a
flood cannot grow memory without bound. `flush()` waits until everything submitted so far is
committed; `close()` flushes and stops the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")
LINGER = 0.05
"""Seconds a batch waits for more items after its first: a transaction costs far more than a row, and
without waiting, a stream of items (a deny every few hook calls) made a transaction of each, whose
cost on the writer's thread took the interpreter from the requests that caused them."""
log = logging.getLogger(__name__)


class BackgroundWriter(ABC, Generic[T]):
    """Items written in batches on a thread; subclasses say how (`write`)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        name: str,
        max_pending: int,
        batch: int = 500,
        linger: float = LINGER,
    ) -> None:
        self.sessions = sessions
        self.name = name
        self.batch = batch
        self.linger = linger
        self.dropped = 0
        self._queue: queue.Queue[T | None] = queue.Queue(max_pending)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @abstractmethod
    def write(self, session: Session, items: list[T]) -> None:
        """Add the items' rows to `session`'s transaction."""

    def submit(self, item: T) -> None:
        self._start()
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1

    def flush(self) -> None:
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _start(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while True:
            waiting = [self._queue.get()]
            gather_until = time.monotonic() + self.linger
            while len(waiting) < self.batch and waiting[-1] is not None:
                try:
                    waiting.append(self._queue.get(timeout=max(0.0, gather_until - time.monotonic())))
                except queue.Empty:
                    break
            items = [item for item in waiting if item is not None]
            try:
                self._write_all(items)
            finally:
                for _ in waiting:
                    self._queue.task_done()
            if len(items) < len(waiting):
                return

    def _write_all(self, items: list[T]) -> None:
        if not items:
            return
        try:
            with self.sessions.begin() as session:
                self.write(session, items)
            return
        except Exception:
            if len(items) == 1:
                log.exception("%s: could not write %r", self.name, items[0])
                return
        for item in items:
            self._write_all([item])
