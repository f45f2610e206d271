"""What both of `serve`'s processes run with: uvicorn without its own signal handling, and the
garbage collector set for a process that lives for hours."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import uvicorn


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the service owns SIGTERM and shuts down in order."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two collections of the youngest generation (Python's default is 700)."""


@contextlib.contextmanager
def long_running_heap() -> Iterator[None]:
    """The garbage collector set for a process that polls for hours: measured, it was a third of the
    event loop's CPU per poll with Python's defaults.

    Everything built at start-up (the SDK's and SQLAlchemy's modules and models, the config, the
    store) lives as long as the process, yet every full collection walked it again: it is frozen
    out of collection (`gc.freeze`). A poll allocates thousands of short-lived objects, and with
    the default threshold of 700 those alive at a collection (other polls in flight) were promoted
    and walked by older generations' collections again: collecting the youngest generation every
    10,000 allocations promotes far fewer. On exit the collector is set back as it was found.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
