"""Page views of a hostile change: a tool whose input schema has 100,000 properties, all changed.

Goal (issue 16): a change is diffed once, when it is recorded; a view of its diff or tool page
renders from what was stored, so it costs well under a second of CPU and a few MB however large the
schema. Three versions of a one-tool listing (about 2.7 MB each, every property's type changing at
each step) are recorded through the store; then CPU seconds, size and allocation peak of the
adjacent diff page, a diff across two steps, the tool page and the server page, each next to the
same page for a 20-property schema measured in the same run (the baseline).

    python bench/bench_hostile_pages.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import common  # noqa: F401  (the import path: the repository root and tests/)
import httpx
from support.polls import record_poll
from support.tools import tool
from support.web import make_app

from monitor.config import ServerConfig
from monitor.store import Store, make_engine, migrate
from monitor.store.registration import sync_servers

PROPERTIES = 100_000
SMALL = 20
KINDS = ("string", "integer", "boolean")
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PAGES = {
    "diff page, adjacent": "/servers/{name}/diff?from=1&to=2",
    "diff page, v1 -> v3": "/servers/{name}/diff?from=1&to=3",
    "tool page": "/servers/{name}/tools/bulk",
    "server page": "/servers/{name}",
}


def listing(properties: int, kind: str) -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {f"p{i:06d}": {"type": kind} for i in range(properties)}}
    return [tool("bulk", description="Bulk import.", input_schema=schema)]


def record(store: Store, name: str, properties: int) -> None:
    config = ServerConfig(name=name, transport="http", url="http://127.0.0.1:9/")
    server_id = sync_servers(store, [config], T0)[name]
    for step, kind in enumerate(KINDS):
        at = T0 + timedelta(hours=step)
        record_poll(store, server_id, listing(properties, kind), at)


async def _view(client: httpx.AsyncClient, path: str) -> tuple[float, float, int, float]:
    """CPU seconds of the first view and of the next, bytes of a view, then its allocation peak in MB."""
    first = time.process_time()
    assert (await client.get(path)).status_code == 200, path
    first = time.process_time() - first
    cpu = time.process_time()
    response = await client.get(path)
    cpu = time.process_time() - cpu
    assert response.status_code == 200, path
    tracemalloc.start()
    await client.get(path)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return first, cpu, len(response.content), peak


async def measure(store: Store) -> dict[str, dict[str, tuple[float, float, int, float]]]:
    transport = httpx.ASGITransport(app=make_app(store, token=None, clock=None))
    results: dict[str, dict[str, tuple[float, float, int, float]]] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=600) as client:
        for name in ("huge", "small"):
            paths = {label: path.format(name=name) for label, path in PAGES.items()}
            results[name] = {label: await _view(client, path) for label, path in paths.items()}
    return results


def main() -> list[tuple[str, float, float, str]]:
    size = len(json.dumps(listing(PROPERTIES, KINDS[0]), separators=(",", ":")))
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        migrate(engine)
        store = Store(engine)
        started = time.perf_counter()
        record(store, "huge", PROPERTIES)
        record(store, "small", SMALL)
        took = time.perf_counter() - started
        print(f"recorded 3 versions of a {size / 1e6:.1f} MB listing in {took:.1f} s")
        try:
            results = asyncio.run(measure(store))
        finally:
            engine.dispose()
    rows = []
    for label in PAGES:
        first, cpu, length, peak = results["huge"][label]
        _, base_cpu, base_length, base_peak = results["small"][label]
        print(
            f"{label:<22} {PROPERTIES:,} properties: {cpu:6.3f} s CPU (first view {first:.3f} s), "
            f"{length / 1e6:5.2f} MB page, {peak:6.1f} MB allocated at peak  ({SMALL} properties: "
            f"{base_cpu:.3f} s, {base_length / 1e6:.2f} MB, {base_peak:.1f} MB)"
        )
        rows.append((f"hostile: {label} (s CPU) vs 20 properties", cpu, base_cpu, "<1 s"))
    return rows


if __name__ == "__main__":
    main()
