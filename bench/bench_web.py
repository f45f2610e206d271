"""Dashboard and API latency over a large history: 500 servers, 20,000 versions, 1,000,000 polls.

The database (SQLite) is built in bulk with SQLAlchemy core, not through the poller: 40 versions of
a 20-tool listing per server, each version changing one tool, with 50 polls per version (so the
versions' poll counts sum to 1,000,000), findings for every step, alerts and retained poll attempts.
Then the median latency of the overview, a server page, a diff page and `at?time=` through the
ASGI app, next to a trivial /healthz request measured in the same run.

Then the same pages as a caller sees them (issue 29): the app in its own process, served the way
`drift-monitor serve` serves it (`bench_decisions.app_process`), each page asked over one kept-alive
connection in turn, over 8 and over 64 kept-alive connections at once (each asking as soon as its
last answer came), and over a new connection per request, timed by the caller, next to /healthz
asked the same ways in the same run.

Goals (issue): pages under 150 ms, `at` under 20 ms; the build under about 60 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common  # noqa: F401  (the import path: the repository root and tests/)
import httpx
from bench_decisions import HOST, Call, app_process, http_request, read_response
from common import quantile
from sqlalchemy import Engine, insert
from support.tools import tool
from support.web import make_app

from monitor.core.fingerprint import canonical_tool
from monitor.servers.overview import SERVERS_PER_PAGE
from monitor.store import Store, make_engine, migrate
from monitor.store.models import (
    Alert,
    FindingRecord,
    Listing,
    ListingTool,
    PollAttempt,
    Server,
    Snapshot,
    ToolDefinition,
)

SERVERS = 500
VERSIONS = 40
TOOLS = 20
POLLS_PER_VERSION = 1_000_000 // (SERVERS * VERSIONS)
START = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(hours=6)
WORDS = ("index", "record", "tenant", "query", "export", "rebuild", "cursor", "replica", "window", "page")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _tool(server: int, index: int, revision: int) -> dict[str, Any]:
    words = " ".join(WORDS[(server + index + k + revision) % len(WORDS)] for k in range(30))
    properties = {"q": {"type": "string"}, **({"limit": {"type": "integer"}} if revision % 2 else {})}
    return tool(
        f"tool_{index:02d}",
        title=f"Tool {index}",
        description=f"{words}. Server {server}, revision {revision}.",
        input_schema={"type": "object", "properties": properties, "required": ["q"]},
        annotations={"readOnlyHint": revision % 3 != 1, "openWorldHint": False},
    )


def _add_definition(
    definitions: list[dict[str, Any]], definition_id: int, server: int, index: int, revision: int
) -> tuple[int, str]:
    """Append one tool definition row; returns its id and canonical form."""
    definition = _tool(server, index, revision)
    form = canonical_tool(definition)
    definitions.append(
        {"id": definition_id, "fingerprint": _sha(form), "name": definition["name"], "definition": definition}
    )
    return definition_id, form


def build(engine: Engine) -> dict[str, int]:
    """Insert the whole history in bulk; returns row counts."""
    servers: list[dict[str, Any]] = []
    definitions: list[dict[str, Any]] = []
    listings: list[dict[str, Any]] = []
    members: list[dict[str, Any]] = []
    snapshots: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    alerts: list[dict[str, Any]] = []
    definition_id = listing_id = snapshot_id = 0
    end = START + STEP * VERSIONS
    for s in range(SERVERS):
        server_id = s + 1
        failing = s % 25 == 0
        servers.append(
            {
                "id": server_id,
                "name": f"server-{s:04d}",
                "transport": "http",
                "url": f"https://mcp{s}.example/mcp",
                "origin": "config",
                "created_at": START,
                "consecutive_failures": 3 if failing else 0,
                "last_poll_at": end,
                "last_success_at": end - (STEP if failing else timedelta(0)),
                "last_error": "connect: connection refused" if failing else None,
                "protocol_version": "2025-11-25",
                "era": "handshake",
            }
        )
        revisions = [0] * TOOLS
        current: dict[int, tuple[int, str]] = {}  # tool index -> (definition id, canonical form)

        for index in range(TOOLS):
            definition_id += 1
            current[index] = _add_definition(definitions, definition_id, s, index, 0)
        previous_snapshot = None
        for version in range(1, VERSIONS + 1):
            changed = None
            if version > 1:
                changed = (version * 7 + s) % TOOLS
                revisions[changed] += 1
                definition_id += 1
                current[changed] = _add_definition(definitions, definition_id, s, changed, revisions[changed])
            listing_id += 1
            forms = [current[i][1] for i in range(TOOLS)]  # names sort as their indexes
            first_seen = START + STEP * (version - 1)
            listings.append(
                {
                    "id": listing_id,
                    "fingerprint": _sha("[" + ",".join(forms) + "]"),
                    "tool_count": TOOLS,
                    "created_at": first_seen,
                }
            )
            members.extend(
                {"listing_id": listing_id, "tool_id": current[i][0], "position": i} for i in range(TOOLS)
            )
            snapshot_id += 1
            snapshots.append(
                {
                    "id": snapshot_id,
                    "server_id": server_id,
                    "version": version,
                    "listing_id": listing_id,
                    "first_seen": first_seen,
                    "last_seen": first_seen + STEP - timedelta(minutes=5),
                    "poll_count": POLLS_PER_VERSION,
                    "protocol_version": "2025-11-25",
                    "server_info": {"name": f"server-{s}", "version": f"1.{version}"},
                }
            )
            if changed is not None and previous_snapshot is not None:
                revision = revisions[changed]
                common = {
                    "server_id": server_id,
                    "from_snapshot_id": previous_snapshot,
                    "to_snapshot_id": snapshot_id,
                    "detected_at": first_seen,
                    "tool": f"tool_{changed:02d}",
                    "detail": None,
                }
                findings.append(
                    {
                        **common,
                        "rule": "description-changed",
                        "severity": "low",
                        "severity_rank": 1,
                        "field": "description",
                        "old": None,
                        "new": None,
                        "message": f"The description of tool_{changed:02d} changed.",
                    }
                )
                if revision % 3 == 1:
                    findings.append(
                        {
                            **common,
                            "rule": "read-only-revoked",
                            "severity": "critical",
                            "severity_rank": 4,
                            "field": "annotations.readOnlyHint",
                            "old": True,
                            "new": False,
                            "message": f"tool_{changed:02d} is no longer read-only.",
                        }
                    )
            previous_snapshot = snapshot_id
        for k in range(5):
            attempts.append(
                {
                    "server_id": server_id,
                    "started_at": end - timedelta(minutes=5 * k),
                    "duration_ms": 80.0 + k,
                    "ok": not failing,
                    "error_kind": "connect" if failing else None,
                    "error": "connection refused" if failing else None,
                    "snapshot_id": None if failing else snapshot_id,
                    "pages": None if failing else 1,
                }
            )
        for k in range(2):
            state = ("open", "acknowledged", "resolved")[(s + k) % 3]
            alerts.append(
                {
                    "server_id": server_id,
                    "rule": "read-only-revoked",
                    "severity": "critical" if k == 0 else "high",
                    "severity_rank": 4 if k == 0 else 3,
                    "tool": f"tool_{k:02d}",
                    "session_id": None,
                    "state": state,
                    "open_key": None if state == "resolved" else f"{server_id}/read-only-revoked/{k}",
                    "message": f"tool_{k:02d} is no longer read-only.",
                    "opened_at": end - timedelta(hours=k + 1),
                    "last_seen_at": end,
                    "acknowledged_at": end if state == "acknowledged" else None,
                    "resolved_at": end if state == "resolved" else None,
                }
            )
    with engine.begin() as connection:
        for model, rows in (
            (Server, servers),
            (ToolDefinition, definitions),
            (Listing, listings),
            (ListingTool, members),
            (Snapshot, snapshots),
            (FindingRecord, findings),
            (PollAttempt, attempts),
            (Alert, alerts),
        ):
            for start in range(0, len(rows), 20_000):
                connection.execute(insert(model), rows[start : start + 20_000])
    return {
        "servers": len(servers),
        "tool definitions": len(definitions),
        "listings": len(listings),
        "listing tools": len(members),
        "versions": len(snapshots),
        "polls": sum(row["poll_count"] for row in snapshots),
        "findings": len(findings),
        "alerts": len(alerts),
    }


async def _median_ms(
    client: httpx.AsyncClient, path: str, repeat: int, check: Callable[[httpx.Response], bool]
) -> float:
    response = await client.get(path)  # warm caches and the statement cache
    assert check(response), (path, response.status_code, response.text[:300])
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = await client.get(path)
        samples.append(time.perf_counter() - start)
        assert response.status_code == 200, path
    return statistics.median(samples) * 1000


async def measure(store: Store) -> dict[str, float]:
    app = make_app(store, token=None, clock=None)
    middle = f"server-{SERVERS // 2:04d}"
    instant = (START + STEP * (VERSIONS // 2) + timedelta(minutes=17)).isoformat().replace("+00:00", "Z")
    transport = httpx.ASGITransport(app=app)
    ok = lambda r: r.status_code == 200  # noqa: E731
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        results = {
            "healthz": await _median_ms(client, "/healthz", 200, ok),
            "overview": await _median_ms(
                client, "/", 15, lambda r: ok(r) and r.text.count("<tr") > SERVERS_PER_PAGE
            ),
            "server": await _median_ms(client, f"/servers/{middle}", 25, ok),
            "diff": await _median_ms(client, f"/servers/{middle}/diff?from=20&to=21", 25, ok),
            "diff_far": await _median_ms(client, f"/servers/{middle}/diff?from=1&to={VERSIONS}", 25, ok),
            "at": await _median_ms(
                client,
                f"/api/v1/servers/{middle}/at?time={instant}",
                200,
                lambda r: ok(r) and r.json()["snapshot"]["version"] == VERSIONS // 2 + 1,
            ),
            "changes": await _median_ms(client, "/api/v1/changes?min_severity=critical&limit=100", 50, ok),
        }
    return results


SOCKET_PAGES = {
    "/healthz": "GET /healthz (baseline)",
    "/": "GET / overview",
    f"/servers/server-{SERVERS // 2:04d}": "GET /servers/NAME",
    f"/servers/server-{SERVERS // 2:04d}/diff?from=20&to=21": "GET /servers/NAME/diff",
    f"/api/v1/servers/server-{SERVERS // 2:04d}/at?time="
    + (START + STEP * (VERSIONS // 2) + timedelta(minutes=17)).isoformat().replace("+00:00", "Z"): (
        "GET /api/v1/servers/NAME/at"
    ),
    "/api/v1/changes?min_severity=critical&limit=100": "GET /api/v1/changes",
}
"""Paths asked over real connections (the same pages and instant as `measure`)."""


async def _closed_loop(port: int, call: Call, connections: int, each: int) -> list[float]:
    """`connections` kept-alive connections, opened first, each asking `each` times in turn."""
    opened = await asyncio.gather(*(asyncio.open_connection(HOST, port) for _ in range(connections)))
    latencies: list[float] = []

    async def asker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(each):
            start = time.perf_counter()
            writer.write(call.request)
            status, _ = await read_response(reader)
            latencies.append((time.perf_counter() - start) * 1000)
            assert status == b"200", status

    try:
        await asyncio.gather(*(asker(reader, writer) for reader, writer in opened))
    finally:
        for _, writer in opened:
            writer.close()
    return latencies


async def _new_connections(port: int, call: Call, count: int) -> list[float]:
    latencies: list[float] = []
    for _ in range(count):
        start = time.perf_counter()
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(call.closing())
        status, _ = await read_response(reader)
        writer.close()
        latencies.append((time.perf_counter() - start) * 1000)
        assert status == b"200", status
    return latencies


async def _as_callers_see(port: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Per path and way of asking: (p50, p99) in ms."""
    figures: dict[str, dict[str, tuple[float, float]]] = {}
    for path in SOCKET_PAGES:
        call = Call(http_request("GET", path))
        await _closed_loop(port, call, 1, 2)  # warm the app's caches for this page
        ways = {
            "1 kept-alive": await _closed_loop(port, call, 1, 20),
            "8 kept-alive": await _closed_loop(port, call, 8, 5),
            "64 kept-alive": await _closed_loop(port, call, 64, 2),
            "new connection each": await _new_connections(port, call, 20),
        }
        figures[path] = {way: (quantile(v, 0.5), quantile(v, 0.99)) for way, v in ways.items()}
    return figures


def print_socket_figures(figures: dict[str, dict[str, tuple[float, float]]]) -> None:
    ways = list(next(iter(figures.values())))
    print(f"as a caller sees it, p50 / p99 ms (load {os.getloadavg()[0]:.1f}):")
    print(f"  {'':<30}" + "".join(f"{way:>22}" for way in ways))
    for path, label in SOCKET_PAGES.items():
        cells = "".join(f"{f'{p50:.1f} / {p99:.1f}':>22}" for p50, p99 in figures[path].values())
        print(f"  {label:<30}{cells}")


def main() -> list[tuple[str, float, float, str]]:
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        migrate(engine)
        started = time.perf_counter()
        counts = build(engine)
        built = time.perf_counter() - started
        size_mb = (Path(folder) / "bench.db").stat().st_size / 1e6
        print(", ".join(f"{n:,} {what}" for what, n in counts.items()))
        print(f"built in {built:.1f} s (goal < 60 s), {size_mb:.0f} MB of SQLite")
        store = Store(engine)
        try:
            ms = asyncio.run(measure(store))
        finally:
            engine.dispose()
        with app_process(f"sqlite:///{Path(folder) / 'bench.db'}", "pages") as app:
            sockets = asyncio.run(_as_callers_see(app.port))
    print(f"GET /healthz (baseline, same run):        {ms['healthz']:8.2f} ms")
    print(
        f"GET / overview, {SERVERS} servers, a page of {SERVERS_PER_PAGE}: "
        f"{ms['overview']:8.2f} ms  (goal < 150 ms)"
    )
    print(f"GET /servers/NAME, 40 versions, 20 tools: {ms['server']:8.2f} ms  (goal < 150 ms)")
    print(f"GET /servers/NAME/diff, adjacent:         {ms['diff']:8.2f} ms  (goal < 150 ms)")
    print(f"GET /servers/NAME/diff, v1 -> v40:        {ms['diff_far']:8.2f} ms  (goal < 150 ms)")
    print(f"GET /api/v1/servers/NAME/at?time=:        {ms['at']:8.2f} ms  (goal < 20 ms)")
    print(f"GET /api/v1/changes?min_severity=critical:{ms['changes']:8.2f} ms")
    print_socket_figures(sockets)
    base = ms["healthz"]
    kept = {path: ways["8 kept-alive"][0] for path, ways in sockets.items()}
    return [
        ("web: overview, 8 kept-alive (ms) vs /healthz", kept["/"], kept["/healthz"], "<150 ms"),
        ("web: build 1M-poll history (s)", built, 60.0, "<60 s"),
        ("web: overview page (ms) vs /healthz", ms["overview"], base, "<150 ms"),
        ("web: server page (ms) vs /healthz", ms["server"], base, "<150 ms"),
        ("web: diff page, adjacent (ms) vs /healthz", ms["diff"], base, "<150 ms"),
        ("web: diff page, v1->v40 (ms) vs /healthz", ms["diff_far"], base, "<150 ms"),
        ("web: at?time= (ms) vs /healthz", ms["at"], base, "<20 ms"),
    ]


if __name__ == "__main__":
    main()
