"""The incident pages over the large history of bench_web (500 servers, 20,000 versions, 1,000,000
polls), plus one host session per server holding an older listing.

Median latency of the alerts page (worst first, with the diff behind each alert), the sessions page
(each session's version, distance and missed changes), the tool search by name and at an instant,
`at?tool=` and `/changes?tool=&rule=`, next to /healthz measured in the same run.

Goals (issue 14): pages under 150 ms like the other pages; `at?tool=` under 20 ms like `at`.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import common  # noqa: F401  (the import path: the repository root and tests/)
import httpx
from bench_web import SERVERS, START, STEP, VERSIONS, _median_ms, build
from sqlalchemy import Engine, func, insert, select
from support.web import make_app

from monitor.sessions.pages import SESSIONS_PER_PAGE as PER_PAGE
from monitor.store import Store, make_engine, migrate
from monitor.store.models import Alert, AlertFinding, FindingRecord, HostSession, Listing, Snapshot

HELD_VERSION = VERSIONS - 4
"""The version every bench session still holds: four versions behind."""


def add_sessions(engine: Engine) -> int:
    """One host session per server, holding the listing of an older version."""
    with engine.begin() as connection:
        held = connection.execute(
            select(Snapshot.server_id, Listing.fingerprint)
            .join(Listing, Listing.id == Snapshot.listing_id)
            .where(Snapshot.version == HELD_VERSION)
        ).all()
        now = START + STEP * VERSIONS
        rows: list[dict[str, Any]] = [
            {
                "server_id": server_id,
                "session_id": f"host-{server_id}",
                "client": "claude-code/2.1",
                "connected_at": now - timedelta(days=1),
                "last_heartbeat_at": now,
                "fingerprint": fingerprint,
                "fingerprint_since": now - timedelta(days=1),
            }
            for server_id, fingerprint in held
        ]
        connection.execute(insert(HostSession), rows)
    return len(rows)


def link_alerts(engine: Engine) -> int:
    """Attach each alert to its server's newest finding, as the alert path does."""
    with engine.begin() as connection:
        newest = (
            select(FindingRecord.server_id, func.max(FindingRecord.id).label("finding_id"))
            .group_by(FindingRecord.server_id)
            .subquery()
        )
        rows = connection.execute(
            select(Alert.id, newest.c.finding_id).join(newest, newest.c.server_id == Alert.server_id)
        ).all()
        connection.execute(insert(AlertFinding), [{"alert_id": a, "finding_id": f} for a, f in rows])
    return len(rows)


async def _first_ms(client: httpx.AsyncClient, path: str) -> float:
    """One cold request: what the first reader of the page waits."""
    start = time.perf_counter()
    response = await client.get(path)
    assert response.status_code == 200, path
    return (time.perf_counter() - start) * 1000


async def measure(store: Store) -> dict[str, float]:
    app = make_app(store, token=None, clock=START + STEP * VERSIONS)
    middle = f"server-{SERVERS // 2:04d}"
    instant = (START + STEP * (VERSIONS // 2) + timedelta(minutes=17)).isoformat().replace("+00:00", "Z")
    ok = lambda r: r.status_code == 200  # noqa: E731
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        return {
            "healthz": await _median_ms(client, "/healthz", 200, ok),
            "overview": await _median_ms(client, "/", 10, ok),
            "alerts": await _median_ms(client, "/alerts", 15, lambda r: ok(r) and "/diff?from=" in r.text),
            "alerts_filtered": await _median_ms(
                client, f"/alerts?state=all&severity=critical&server={middle}", 25, ok
            ),
            "sessions_first": await _first_ms(client, "/sessions"),
            "sessions": await _median_ms(
                client, "/sessions", 10, lambda r: ok(r) and r.text.count("4 versions behind") == PER_PAGE
            ),
            "search": await _median_ms(client, "/search?q=tool_07", 15, ok),
            "search_at": await _median_ms(
                client, f"/search?q=tool_07&time={instant}", 5, lambda r: ok(r) and "in force since" in r.text
            ),
            "at_tool": await _median_ms(
                client,
                f"/api/v1/servers/{middle}/at?time={instant}&tool=tool_07",
                100,
                lambda r: ok(r) and r.json()["tool_version"] is not None,
            ),
            "changes_tool": await _median_ms(
                client, "/api/v1/changes?tool=tool_07&rule=read-only-revoked&limit=100", 50, ok
            ),
        }


def main() -> list[tuple[str, float, float, str]]:
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        migrate(engine)
        started = time.perf_counter()
        counts = build(engine)
        counts["host sessions"] = add_sessions(engine)
        counts["alert findings"] = link_alerts(engine)
        print(", ".join(f"{n:,} {what}" for what, n in counts.items()))
        print(f"built in {time.perf_counter() - started:.1f} s")
        try:
            ms = asyncio.run(measure(Store(engine)))
        finally:
            engine.dispose()
    base = ms["healthz"]
    figures = [
        ("GET /healthz (baseline, same run)", "healthz", ""),
        ("GET / overview (fleet tiles)", "overview", "<150 ms"),
        ("GET /alerts, unresolved worst first", "alerts", "<150 ms"),
        ("GET /alerts?state=all&severity=&server=", "alerts_filtered", "<150 ms"),
        (f"GET /sessions, first of {SERVERS} behind, cold", "sessions_first", ""),
        (f"GET /sessions, first of {SERVERS} behind, again", "sessions", "<150 ms"),
        ("GET /search?q=tool_07", "search", "<150 ms"),
        ("GET /search?q=tool_07&time=, 20 claims", "search_at", "<150 ms"),
        ("GET /api/v1/servers/NAME/at?tool=", "at_tool", "<20 ms"),
        ("GET /api/v1/changes?tool=&rule=", "changes_tool", ""),
    ]
    for label, key, goal in figures:
        print(f"{label:<44} {ms[key]:8.2f} ms  {f'(goal {goal})' if goal else ''}")
    return [(f"triage: {label} (ms) vs /healthz", ms[key], base, goal) for label, key, goal in figures[1:]]


if __name__ == "__main__":
    main()
