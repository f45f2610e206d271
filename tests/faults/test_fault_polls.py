"""Hostile servers polled through the real `Poller` and `Store`, in one run with healthy servers.

What must hold: every fault becomes exactly one recorded, readable error (kind and message in
`poll_attempts` and on the server row), ended by the fault itself or else by the poll's deadline;
nothing of a faulty server's listing is stored, not even the pages it sent before failing; the
healthy servers in the same run are polled and stored exactly as when alone, without waiting for any
fault; no server process outlives its poll.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from support import (
    faulty_http,
    held_connections,
    http_server,
    poll_history,
    refused_url,
    server_command,
    stored_tools,
    tool,
)

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.fingerprint import fingerprint
from monitor.store import PollOutcome, Store, make_engine, migrate
from monitor.store.models import Listing, ListingTool, PollAttempt, Server, Snapshot, ToolDefinition

HEALTHY_TOOLS: list[dict[str, Any]] = [
    tool(
        "search",
        description="Search the runbooks.",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        read_only=True,
    ),
    tool("page", description="Page the on-call engineer."),
    tool("ack", description="Acknowledge a page."),
]
FAULT_TIMEOUT = 10.0
"""The deadline that ends a trickle or a hang. The faults that trickle come after `initialize`, whose
answer must arrive first: with 4 s, a machine loaded past its cores (the suite beside a benchmark)
once took longer than that to answer a faulty server's `initialize`."""
HEALTHY_TIMEOUT = 30.0
"""The healthy servers get a generous timeout of their own, so only the fault can explain a delay."""
NO_HANG = 600.0
"""Only so that a poll that never ends fails its test instead of hanging the suite: not a bound on how
long polls take (a busy machine may take long). What ends a fault that does not end by itself (a
hang, a trickle) is the poll's deadline, and the tests check that it was: its error names it."""
DEADLINE_STRUCK = f"within {FAULT_TIMEOUT:g} s"
"""In the error of a poll that the FAULT_TIMEOUT deadline ended."""


@dataclass(frozen=True)
class Case:
    name: str
    server: dict[str, Any]
    kinds: frozenset[str]
    """The recorded error kind; empty for a poll that must succeed."""
    fragments: tuple[str, ...] = ()
    tools: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def faulty_servers() -> Iterator[tuple[str, str]]:
    """(base URL of faulty_server.py's HTTP modes, URL of its accept-and-never-answer port)."""
    with faulty_http() as urls:
        yield urls


@pytest.fixture(scope="module")
def tools_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("healthy") / "tools.json"
    path.write_text(json.dumps(HEALTHY_TOOLS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def healthy_http(tools_file: Path) -> Iterator[str]:
    """A real MCPServer over Streamable HTTP, serving HEALTHY_TOOLS two to a page."""
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "2") as url:
        yield url


def stdio(script: str, *args: str) -> dict[str, Any]:
    command, *argv = server_command(script, *args)
    return {"transport": "stdio", "command": command, "args": argv}


def faulty(mode: str) -> dict[str, Any]:
    return stdio("faulty_server.py", "stdio", mode)


def cases(base: str, silent: str, healthy_url: str, tools_file: Path, held_url: str) -> list[Case]:
    def http(mode: str) -> dict[str, Any]:
        return {"transport": "http", "url": f"{base}/{mode}/mcp"}

    t = f"{FAULT_TIMEOUT:g}"
    return [
        Case(
            "http-accepts-then-hangs",
            {"transport": "http", "url": silent},
            frozenset({"timeout"}),
            (f"no answer to initialize within {t} s",),
        ),
        Case(
            "http-held-until-healthy-recorded",
            {"transport": "http", "url": held_url, "timeout": HEALTHY_TIMEOUT},
            frozenset({"connect"}),
        ),
        Case(
            "http-trickles-bytes",
            http("trickle"),
            frozenset({"timeout"}),
            (f"no answer to tools/list within {t} s",),
        ),
        Case(
            "http-50mb-listing",
            http("huge"),
            frozenset({"limit"}),
            (
                "listing exceeds 16777216 bytes: the answer to tools/list declared ",
                " bytes in its Content-Length",
            ),
        ),
        Case(
            "http-drops-mid-page",
            http("drop-mid-page"),
            frozenset({"connect"}),
            ("during tools/list (page 2)", "peer closed connection"),
        ),
        Case(
            "http-wrong-protocol-version",
            http("wrong-version"),
            frozenset({"protocol"}),
            ("server chose protocol version '1999-01-01'",),
        ),
        Case("http-invalid-json", http("invalid-json"), frozenset({"malformed"}), ("not JSON-RPC",)),
        Case(
            "http-json-rpc-error",
            http("rpc-error"),
            frozenset({"server-error"}),
            ("JSON-RPC error -32603: internal failure in the tool registry",),
        ),
        Case(
            "http-connection-refused",
            {"transport": "http", "url": refused_url()},
            frozenset({"connect"}),
            ("connection refused",),
        ),
        Case(
            "stdio-hangs",
            stdio("hostile_server.py", "hang"),
            frozenset({"timeout"}),
            (f"no answer to initialize within {t} s",),
        ),
        Case(
            "stdio-hangs-after-initialize",
            stdio("hostile_server.py", "hang-after-init"),
            frozenset({"timeout"}),
            (f"no answer to tools/list within {t} s",),
        ),
        Case(
            "stdio-invalid-json",
            stdio("hostile_server.py", "malformed"),
            frozenset({"malformed"}),
            ("not JSON-RPC",),
        ),
        Case(
            "stdio-loops-cursors",
            stdio("hostile_server.py", "loop-cursor"),
            frozenset({"limit"}),
            ("server repeated cursor 'a' on page 3",),
        ),
        Case(
            "stdio-endless-cursor",
            stdio("hostile_server.py", "endless-cursor"),
            frozenset({"limit"}),
            ("listing exceeds 20 pages",),
        ),
        Case(
            "stdio-exits-at-start",
            stdio("hostile_server.py", "exit-early"),
            frozenset({"process-exit"}),
            ("exited before answering initialize", "stderr: fatal: cannot read config file"),
        ),
        Case(
            "stdio-exits-mid-listing",
            faulty("exit-mid-page"),
            frozenset({"process-exit"}),
            ("exited before answering tools/list (page 2)", "stderr: worker crashed while paging"),
        ),
        Case(
            "stdio-prints-before-handshake",
            stdio("hostile_server.py", "garbage-stdout"),
            frozenset({"malformed"}),
            ("'Starting hostile server v6.6.6 ... listening on stdio!'",),
        ),
        Case(
            "stdio-wrong-protocol-version",
            faulty("wrong-version"),
            frozenset({"protocol"}),
            ("server chose protocol version '1999-01-01'",),
        ),
        Case(
            "stdio-trickles-bytes",
            faulty("trickle"),
            frozenset({"timeout"}),
            (f"no answer to tools/list within {t} s",),
        ),
        Case(
            "stdio-missing-command",
            {"transport": "stdio", "command": "/nonexistent/drift-fault-server"},
            frozenset({"connect"}),
            ("cannot start server command",),
        ),
        Case(
            "stdio-ignores-sigterm",
            stdio("hostile_server.py", "ignore-sigterm"),
            frozenset(),
            tools=["echo", "add"],
        ),
        Case(
            "healthy-http",
            {"transport": "http", "url": healthy_url, "timeout": HEALTHY_TIMEOUT},
            frozenset(),
            tools=[t["name"] for t in HEALTHY_TOOLS],
        ),
        Case(
            "healthy-stdio",
            {**stdio("fastmcp_server.py", str(tools_file)), "timeout": HEALTHY_TIMEOUT},
            frozenset(),
            tools=[t["name"] for t in HEALTHY_TOOLS],
        ),
    ]


def with_deadline(case: Case) -> dict[str, Any]:
    """The case's server, with the healthy servers' generous deadline unless its fault is a timeout:
    a fault that ends a poll by itself (a dropped connection, a 50 MB answer refused as it arrives)
    must be recorded as that fault, and on a busy machine FAULT_TIMEOUT can pass first (the faulty
    HTTP modes share one server process, which is also writing the 50 MB answer)."""
    if "timeout" in case.kinds or "timeout" in case.server:
        return case.server
    return {**case.server, "timeout": HEALTHY_TIMEOUT}


async def test_faults_are_recorded_errors_and_healthy_servers_are_unaffected(
    database_url: str, faulty_servers: tuple[str, str], healthy_http: str, tools_file: Path
) -> None:
    """One poll run of 21 faulty servers and 2 healthy ones. Must hold: each fault is one attempt
    with the expected kind and a one-line message naming what went wrong; no faulty server has a
    snapshot, and no tool a faulty server sent (page 1 before a drop included) is stored; the healthy
    servers' listings are stored exactly, and each is recorded before the fault deadline, i.e. it
    waited for no fault; the run ends: each poll by its fault, or by its deadline when the fault is a
    hang or a trickle."""
    base, silent = faulty_servers
    healthy_names = {"healthy-http", "healthy-stdio"}
    with held_connections() as held:
        run = cases(base, silent, healthy_http, tools_file, held.url)
        engine = make_engine(database_url)
        try:
            migrate(engine)
            store = Store(engine, attempts_kept=100, unreachable_after=3)
            config = Config(
                monitor=MonitorSettings(database_url=database_url, poll_timeout=FAULT_TIMEOUT, max_pages=20),
                servers=[ServerConfig(name=case.name, **with_deadline(case)) for case in run],
            )
            poller = Poller(store, config)
            recorded: list[PollOutcome] = []

            def record(outcome: PollOutcome) -> None:
                recorded.append(outcome)
                if healthy_names <= {o.server for o in recorded}:
                    held.release()

            try:
                polled = await asyncio.wait_for(poller.poll(poller.jobs(), record), NO_HANG)
            finally:
                poller.close()
            outcomes = {o.server: o for o in polled}
            _check_run(store, run, outcomes, recorded)
        finally:
            engine.dispose()


def _check_run(
    store: Store,
    run: list[Case],
    outcomes: dict[str, PollOutcome],
    recorded: list[PollOutcome],
) -> None:
    for case in run:
        outcome = outcomes[case.name]
        if not case.kinds:
            assert outcome.ok, (case.name, outcome.error_kind, outcome.error)
            continue
        assert not outcome.ok, case.name
        assert outcome.error_kind in case.kinds, (case.name, outcome.error_kind, outcome.error)
        assert outcome.error is not None
        for fragment in case.fragments:
            assert fragment in outcome.error, (case.name, outcome.error)
        assert "\n" not in outcome.error and len(outcome.error) < 3000, case.name

    # A server held open until both healthy ones were recorded ended only by that release (a
    # connection error, not its deadline): the healthy servers waited for no fault.
    order = [outcome.server for outcome in recorded]
    assert order.index("http-held-until-healthy-recorded") > max(
        order.index(n) for n in ("healthy-http", "healthy-stdio")
    )
    # The run ended because every poll did, each recorded once: those whose fault never ends by itself
    # (a hang, a trickle) were ended by the poll's deadline, and only those.
    assert sorted(order) == sorted(case.name for case in run)
    struck = {name for name, outcome in outcomes.items() if DEADLINE_STRUCK in (outcome.error or "")}
    assert struck == {case.name for case in run if case.kinds == {"timeout"}}, struck

    with store.sessions() as session:
        servers = {s.name: s for s in session.scalars(select(Server))}
        attempts = session.execute(
            select(
                Server.name, PollAttempt.ok, PollAttempt.error_kind, PollAttempt.error, PollAttempt.pages
            ).join(Server, Server.id == PollAttempt.server_id)
        ).all()
        snapshots = session.execute(
            select(Server.name, Snapshot.version, Listing.fingerprint)
            .join(Server, Server.id == Snapshot.server_id)
            .join(Listing, Listing.id == Snapshot.listing_id)
        ).all()
        stored_names = set(session.scalars(select(ToolDefinition.name)))
        listing_count = session.scalar(select(func.count()).select_from(Listing))
        member_count = session.scalar(select(func.count()).select_from(ListingTool))

    assert sorted(a.name for a in attempts) == sorted(c.name for c in run)  # one attempt each
    by_name = {a.name: a for a in attempts}
    for case in run:
        attempt, server = by_name[case.name], servers[case.name]
        if case.kinds:
            assert not attempt.ok
            assert (attempt.error_kind, attempt.error) == (
                outcomes[case.name].error_kind,
                outcomes[case.name].error,
            )
            assert server.last_error == f"{attempt.error_kind}: {attempt.error}"
            assert server.consecutive_failures == 1 and server.last_success_at is None
        else:
            assert attempt.ok and server.last_error is None and server.consecutive_failures == 0
    assert by_name["healthy-http"].pages == 2

    healthy = fingerprint(HEALTHY_TOOLS)
    assert sorted(snapshots) == sorted(
        [
            ("healthy-http", 1, healthy),
            ("healthy-stdio", 1, healthy),
            ("stdio-ignores-sigterm", 1, outcomes["stdio-ignores-sigterm"].fingerprint),
        ]
    )
    assert stored_names == {"search", "page", "ack", "echo", "add"}  # no "page-one", no "big0"
    assert listing_count == 2 and member_count == 5
    assert stored_tools(store, "healthy-http", datetime.now(UTC)) == HEALTHY_TOOLS


@pytest.mark.parametrize("mode", ["drop-mid-page"])
async def test_a_fault_after_a_good_version_keeps_that_version(
    store: Store, faulty_servers: tuple[str, str], healthy_http: str, mode: str
) -> None:
    """A server that answered well once and then drops mid-listing: must hold that its stored version
    stays current and untouched (same listing, poll count 1), the failure is one attempt more, and the
    next good answer is the same version again, not a new one."""
    base, _ = faulty_servers
    good = ServerConfig(name="flaky", transport="http", url=healthy_http)
    bad = ServerConfig(name="flaky", transport="http", url=f"{base}/{mode}/mcp")

    async def poll(server: ServerConfig) -> PollOutcome:
        config = Config(monitor=MonitorSettings(poll_timeout=FAULT_TIMEOUT), servers=[server])
        poller = Poller(store, config)
        try:
            (outcome,) = await poller.poll(poller.jobs())
        finally:
            poller.close()
        return outcome

    first = await poll(good)
    failed = await poll(bad)
    again = await poll(good)
    assert first.ok and first.version == 1
    assert not failed.ok and failed.error_kind == "connect"
    assert again.ok and again.version == 1 and not again.new_version and again.findings == []
    with store.sessions() as session:
        (snapshot,) = session.scalars(select(Snapshot))
        assert snapshot.poll_count == 2
        kinds = [(ok, kind) for _, ok, kind in poll_history(session)]
    assert kinds == [(True, None), (False, "connect"), (True, None)]


async def test_a_50mb_stdio_line_is_bounded_and_other_polls_keep_going(
    store: Store, healthy_http: str
) -> None:
    """A stdio server that answers tools/list with one 50 MB line. The SDK's stdio reader has no
    line-length cap (and joins chunks quadratically), so this keeps the event loop busy for the whole
    poll (healthy polls measured at ~0.07 s alone, up to ~1.1 s during it). Must hold: the poll ends
    as one recorded `timeout` by its deadline (or `limit`, on a machine fast enough to read it all);
    nothing is stored for it; and a healthy server polled back to back for as long as it runs is
    recorded every time, more than once while it still runs."""
    config = Config(
        monitor=MonitorSettings(poll_timeout=FAULT_TIMEOUT),
        servers=[
            ServerConfig(name="huge-line", **faulty("huge")),
            ServerConfig(name="healthy", transport="http", url=healthy_http, timeout=HEALTHY_TIMEOUT),
        ],
    )
    poller = Poller(store, config)
    try:
        huge_job, healthy_job = poller.jobs()
        hog = asyncio.ensure_future(poller.poll_one(huge_job))
        healthy_polls = while_running = 0
        while not hog.done() and healthy_polls < 100:
            outcome = await poller.poll_one(healthy_job)
            assert outcome.ok, outcome.error
            healthy_polls += 1
            while_running += not hog.done()
        failed = await asyncio.wait_for(hog, NO_HANG)
    finally:
        poller.close()
    assert not failed.ok and failed.error_kind in ("timeout", "limit"), failed.error
    # What ended it is its deadline, or the listing limit: its error names which.
    ended_by = DEADLINE_STRUCK if failed.error_kind == "timeout" else f"{huge_job.limits.max_bytes}"
    assert ended_by in (failed.error or ""), failed.error
    assert while_running >= 2, (while_running, healthy_polls)
    with store.sessions() as session:
        counts = dict(
            session.execute(
                select(Server.name, func.count(Snapshot.id))
                .outerjoin(Snapshot, Snapshot.server_id == Server.id)
                .group_by(Server.name)
            ).all()
        )
        attempts = session.scalar(
            select(func.count()).select_from(PollAttempt).where(PollAttempt.ok.is_(False))
        )
    assert counts == {"huge-line": 0, "healthy": 1} and attempts == 1
