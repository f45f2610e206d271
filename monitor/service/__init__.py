"""`drift-monitor serve`: the scheduler, alert delivery, watch sessions and the web app in one process,
and, with `[decisions] listen`, a process answering decisions (`monitor.service.decisions`)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import uvicorn

from monitor import tracing
from monitor.app import create_app
from monitor.approvals.gateway import GatewayAdapter, GatewayServer
from monitor.approvals.point import DecisionPoint
from monitor.collect.instancelock import lock_sqlite
from monitor.collect.poller import Job, Poller
from monitor.collect.scheduler import LeaseRelease, Scheduler, instance_id
from monitor.collect.targets import limits_for
from monitor.collect.watch import WatchManager
from monitor.config import Config
from monitor.identity.callers import Identity
from monitor.notify.alerts import Alerting, alerting_store
from monitor.notify.delivery import Deliverer
from monitor.notify.repost import repost_open_alerts
from monitor.service.decisions import DecisionProcess
from monitor.service.runtime import QuietServer, long_running_heap
from monitor.sessions import service as sessions
from monitor.sinks import reposts_open_alerts
from monitor.store import PollOutcome, Store, check_schema, make_engine

log = logging.getLogger("drift_monitor.service")


async def serve(
    config: Config,
    host: str,
    port: int,
    *,
    ready: Callable[[str], None] | None = None,
    log_setup: Callable[[], None] | None = None,
) -> None:
    """Run until SIGTERM or SIGINT, then stop claiming polls, finish or abandon them, and exit.

    `log_setup` sets up the decision processes' logging as this process's was (it must pickle).
    Spans go to the `[tracing]` endpoint while it runs, if one is configured (`monitor.tracing`)."""
    with tracing.exporting(config.tracing.otlp_endpoint, config.tracing.service_name):
        await _serve(config, host, port, ready=ready, log_setup=log_setup)


async def _serve(
    config: Config,
    host: str,
    port: int,
    *,
    ready: Callable[[str], None] | None,
    log_setup: Callable[[], None] | None,
) -> None:
    lock = lock_sqlite(config.monitor.database_url)
    engine = make_engine(config.monitor.database_url)
    gateway: GatewayServer | None = None
    decision_listener: socket.socket | None = None
    try:
        check_schema(engine)
        owner = instance_id()
        store, alerting = alerting_store(engine, config, hooks=[LeaseRelease(owner)])
        deliverer = Deliverer.from_config(store, config, owner)
        alerting.on_enqueue = deliverer.notify
        poller = Poller(store, config)
        scheduler = Scheduler(store, poller, config, owner)
        scheduler.register(datetime.now(UTC))
        watch = WatchManager(store, scheduler)
        decisions: list[DecisionProcess] = []
        if config.decisions.listen is not None:
            decision_host, _, decision_port = config.decisions.listen.rpartition(":")
            decision_listener = _listen(decision_host.strip("[]"), int(decision_port))
            decisions = [
                DecisionProcess(config, decision_listener, log_setup)
                for _ in range(config.decisions.processes)
            ]
        app = create_app(
            store,
            config,
            poll_now=_poll_now(poller, scheduler),
            alerting=alerting,
            peer_metrics=lambda: [family for process in decisions for family in process.families()],
        )
        gateway = _gateway(app.state.decision_point, app.state.web.identity, config)
        server = QuietServer(  # log_config and log_level None: uvicorn logs through the process's
            # handlers at the levels `cli.logs` set (a level here would turn its access lines back on)
            # httptools, not h11: reading a burst of 1,000 hook calls in pure Python delayed every answer
            # past the decision lane's bound (docs/approvals.md, "Under load")
            uvicorn.Config(
                app, host=host, port=port, http="httptools", log_level=None, lifespan="on", log_config=None
            )
        )

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)

        listener = _listen(host, port)
        bound = listener.getsockname()[1]
        background = [
            asyncio.create_task(server.serve(sockets=[listener]), name="web"),
            asyncio.create_task(deliverer.run(stop), name="deliveries"),
            asyncio.create_task(watch.run(stop), name="watch"),
            asyncio.create_task(_check_sessions_forever(store, config, alerting, stop), name="sessions"),
        ]
        if any(reposts_open_alerts(webhook) for webhook in config.webhooks):
            repost = _repost_forever(store, alerting, config.monitor.alert_repost_interval, stop)
            background.append(asyncio.create_task(repost, name="repost"))
        background += [asyncio.create_task(process.run(stop), name="decisions") for process in decisions]
        with long_running_heap():
            scheduler.start()
            if gateway is not None:
                gateway.start()
                log.info("answering agentgateway's MCP guardrails (ExtMcp gRPC) on %s", gateway.listen)
            url = f"http://{host}:{bound}"
            log.info("drift-monitor %s serving on %s", owner, url)
            if ready is not None:
                ready(url)
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait([stopped, *background], return_when=asyncio.FIRST_COMPLETED)
            stop.set()
            log.info("shutting down: finishing in-flight polls")
            await scheduler.stop()
            if gateway is not None:  # before the web app, whose shutdown writes the decisions waiting
                await asyncio.to_thread(gateway.stop, GATEWAY_GRACE)
            server.should_exit = True
            await asyncio.gather(*background, return_exceptions=True)
            poller.close()
    finally:
        if gateway is not None:  # stopped already after a clean shutdown; stopping again is a no-op
            gateway.stop(0)
        if decision_listener is not None:
            decision_listener.close()
        engine.dispose()
        if lock is not None:
            lock.close()


GATEWAY_GRACE = 5.0
"""Seconds agentgateway's calls under way get to finish at shutdown."""


def _gateway(point: DecisionPoint, identity: Identity, config: Config) -> GatewayServer | None:
    """The ExtMcp service for agentgateway, bound (not started), when `[decisions] agentgateway_listen`
    is set: it asks the web app's decision point, so its decisions count and are kept alike."""
    listen = config.decisions.agentgateway_listen
    if listen is None:
        return None
    try:
        return GatewayServer(
            GatewayAdapter(point, identity), listen, max_message_bytes=config.monitor.max_request_bytes
        )
    except OSError as exc:
        raise StartupError(str(exc)) from None


class StartupError(Exception):
    """`serve` cannot start (the port is taken, the address is not this machine's): one line for the user."""


def _listen(host: str, port: int) -> socket.socket:
    """Bind before serving, so the address (even for port 0) is known and connections queue at once.

    The protocol is named (`IPPROTO_TCP`, not 0): asyncio turns Nagle's algorithm off
    (`TCP_NODELAY`) only on connections accepted from a socket whose protocol says TCP. With it on,
    a response written in two parts waited for the client's delayed ACK, about 40 ms, on every
    request after the first of a kept-alive connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(512)
    except OSError as exc:
        listener.close()
        reason = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc)
        raise StartupError(f"cannot listen on {host}:{port}: {reason}") from None
    return listener


def _poll_now(poller: Poller, scheduler: Scheduler) -> Callable[[str], Awaitable[PollOutcome]]:
    async def poll_now(name: str) -> PollOutcome:
        server_id = await asyncio.to_thread(poller.store.server_id, name)
        if server_id is None:
            raise KeyError(name)
        target = scheduler.targets.get(server_id) or await asyncio.to_thread(scheduler._api_target, server_id)
        if target is None:
            raise KeyError(name)
        return await poller.poll_one(Job(server_id, target, limits_for(poller.config.monitor)))

    return poll_now


async def _check_sessions_forever(
    store: Store, config: Config, alerting: Alerting, stop: asyncio.Event
) -> None:
    settings = config.monitor

    def check() -> None:
        with store.sessions.begin() as session:
            sessions.check_sessions(
                session,
                now=datetime.now(UTC),
                grace=timedelta(seconds=settings.session_grace),
                max_age=timedelta(seconds=settings.session_max_age),
                expiry=timedelta(seconds=settings.session_expiry),
                policy=alerting,
            )

    await _every(settings.session_check_interval, check, stop, "checking host sessions failed")


async def _repost_forever(store: Store, alerting: Alerting, every: float, stop: asyncio.Event) -> None:
    """The open alerts to each sink that re-posts them, every `every` seconds (`monitor.notify.repost`)."""

    def queue() -> None:
        with store.sessions.begin() as session:
            repost_open_alerts(session, alerting, datetime.now(UTC))

    await _every(every, queue, stop, "re-posting open alerts to Alertmanager failed")


async def _every(seconds: float, work: Callable[[], None], stop: asyncio.Event, failed: str) -> None:
    """`work` on a thread, then again `seconds` later, until `stop`: a round that fails is logged
    (`failed`) and the next one runs all the same."""
    while not stop.is_set():
        try:
            await asyncio.to_thread(work)
        except Exception:
            log.exception(failed)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
