"""The decision process: `serve` answers decisions on `[decisions] listen` from a process of its own.

A host runs the tool when its hook does not answer in time, and on the main port the decisions
share one event loop, one interpreter lock and one process's share of the cores with polling, pages
and their garbage collections: when other work took the machine, that process got a third of a core
and a burst of 1,000 hook calls was answered in 1.3-1.8 s (docs/approvals.md, "Under load"). Here
the host hooks, the ToolHive PDP, the decision API and `/healthz` are served by processes that do
nothing else, so the operating system gives decisions a share of the cores of their own (two
processes by default: one's loop reads a burst while the other's decides). Each sends its counters
and histograms to `serve` every `REPORT_EVERY` seconds, and the main port's `/metrics` adds them to
its own (`monitor.metrics.merged`), those of a process that has ended included, so a scrape sees one
monotonic count whichever process answered. They decide from the same database as every instance
(the decision view follows each server's `decision_generation`), so their answers are the main
port's.

`serve` binds the address itself (an error is reported at start, port 0 works, connections queue
while this process starts), starts the process, and starts another when it ends unexpectedly; the
process ends when `serve` tells it to (SIGTERM) or when `serve` is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import uvicorn
from fastapi import FastAPI
from prometheus_client.core import Metric

from monitor import tracing
from monitor.app import create_app
from monitor.collect.poller import Poller
from monitor.config import Config, ConfigError
from monitor.health.api import process_families
from monitor.metrics import merged
from monitor.notify.alerts import alerting_store
from monitor.service.runtime import QuietServer, long_running_heap
from monitor.store import PollOutcome, Store, make_engine
from monitor.web.context import PollNow

log = logging.getLogger("drift_monitor.service.decisions")

RESTART_FIRST = 0.5
"""Seconds before a process that ended unexpectedly is started again; doubled at each failure in a
row (connections wait in the listener's queue meanwhile), up to `RESTART_MAX`."""
RESTART_MAX = 30.0
STABLE = 60.0
"""A process that ran this long before it ended starts the count of failures in a row again."""
STOP_GRACE = 5.0
"""Seconds the process gets to answer the requests under way when `serve` stops."""
REPORT_EVERY = 1.0
"""Seconds between two reports of a decision process's metrics to `serve`."""


class DecisionProcess:
    """The process answering decisions on one listening socket, kept running while `serve` runs."""

    def __init__(self, config: Config, listener: socket.socket, log_setup: Callable[[], None] | None) -> None:
        self.config = config
        self.listener = listener
        self.log_setup = log_setup
        self.address = "{}:{}".format(*listener.getsockname()[:2])
        self.latest: list[Metric] = []
        """The metrics the running process reported last."""
        self.ended: list[Metric] = []
        """Those its predecessors reported last, summed: counted still, so counts never fall."""

    def families(self) -> list[Metric]:
        """What this process and its predecessors counted (any thread)."""
        return [*self.ended, *self.latest]

    async def run(self, stop: asyncio.Event) -> None:
        """Keep one process answering until `stop` is set (or this is cancelled), then stop it
        (SIGTERM, then SIGKILL after `STOP_GRACE`; the loop waits: `serve` is stopping)."""
        delay = RESTART_FIRST
        while not stop.is_set():
            process, reports = self._start()
            loop = asyncio.get_running_loop()
            loop.add_reader(reports.fileno(), self._receive, reports)
            started, ended = time.monotonic(), False
            try:
                ended = await _ends_before(process, stop)
            finally:
                loop.remove_reader(reports.fileno())
                reports.close()
                self.ended, self.latest = merged([*self.ended, *self.latest]), []
                if not ended:  # `stop`, or this task cancelled: the process ends with it
                    _stop(process)
            if not ended:
                return
            process.join()
            if time.monotonic() - started >= STABLE:
                delay = RESTART_FIRST
            log.error(
                "the decision process on %s ended (exit code %s); starting another in %.1f s",
                self.address,
                process.exitcode,
                delay,
                extra={"event": "decisions.process_ended"},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, RESTART_MAX)

    def _receive(self, reports: Connection) -> None:
        try:
            self.latest = reports.recv()
        except (EOFError, OSError):  # the process has ended: its sentinel says so too
            asyncio.get_running_loop().remove_reader(reports.fileno())

    def _start(self) -> tuple[BaseProcess, Connection]:
        context = multiprocessing.get_context("spawn")  # a new interpreter: no threads or loop copied
        reports, report = context.Pipe(duplex=False)
        process = context.Process(
            target=answer_decisions,
            args=(self.config, self.listener, report, self.log_setup),
            name="drift-monitor decisions",
        )
        process.start()
        report.close()  # the process's end now: at its exit, `reports` reads the end of the pipe
        log.info(
            "answering decisions on http://%s (process %s)",
            self.address,
            process.pid,
            extra={"event": "decisions.process_started"},
        )
        return process, reports


async def _ends_before(process: BaseProcess, stop: asyncio.Event) -> bool:
    """True when `process` ends, False when `stop` is set first."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[bool] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(True)

    loop.add_reader(process.sentinel, end)
    stopped: asyncio.Future[bool] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([ended, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_reader(process.sentinel)
        stopped.cancel()
    return ended.done()


def _stop(process: BaseProcess) -> None:
    process.terminate()
    process.join(STOP_GRACE)
    if process.is_alive():
        process.kill()
        process.join()


# --- in the decision process --------------------------------------------------------------------


def answer_decisions(
    config: Config, listener: socket.socket, report: Connection, log_setup: Callable[[], None] | None
) -> None:
    """The decision process's whole life: serve until SIGTERM or until its parent is gone.

    SIGINT is ignored: a Ctrl-C reaches the whole process group, and `serve` stops this process
    itself once it has stopped taking new work, so it is not started again meanwhile."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_setup is not None:
        log_setup()
    with tracing.exporting(config.tracing.otlp_endpoint, config.tracing.service_name):
        asyncio.run(_serve(config, listener, report))


async def _serve(config: Config, listener: socket.socket, report: Connection) -> None:
    engine = make_engine(config.monitor.database_url)
    try:
        store, alerting = alerting_store(engine, config)  # a refresh's findings alert as any poll's
        poll_now = _refresh(store, config) if config.decisions.refresh_on_decision else None
        app = create_app(store, config, poll_now=poll_now, alerting=alerting, decisions_only=True)
        server = QuietServer(  # httptools, log_config and log_level None: as the main port's (`serve`)
            uvicorn.Config(app, http="httptools", log_level=None, lifespan="on", log_config=None)
        )
        loop = asyncio.get_running_loop()

        def leave() -> None:
            server.should_exit = True

        loop.add_signal_handler(signal.SIGTERM, leave)
        reporter = threading.Thread(target=_report, args=(report, app), name="metrics-report", daemon=True)
        reporter.start()
        parent = multiprocessing.parent_process()
        if parent is not None:  # readable once `serve` is gone, however it ended
            loop.add_reader(parent.sentinel, leave)
        with long_running_heap():
            await server.serve(sockets=[listener])
    finally:
        engine.dispose()


def _report(report: Connection, app: FastAPI) -> None:
    """This process's metrics to `serve`, every `REPORT_EVERY` seconds, until `serve` is gone."""
    while True:
        try:
            report.send(process_families(app))
        except OSError:
            return
        time.sleep(REPORT_EVERY)


def _refresh(store: Store, config: Config) -> PollNow:
    """`refresh_on_decision`'s poll, made by this process as `drift-monitor poll NAME` makes one."""
    poller = Poller(store, config)

    async def poll_now(name: str) -> PollOutcome:
        try:
            jobs = await asyncio.to_thread(poller.jobs, [name])
        except ConfigError:
            raise KeyError(name) from None
        if not jobs:  # a config server whose target cannot be resolved
            raise KeyError(name)
        return await poller.poll_one(jobs[0])

    return poll_now
