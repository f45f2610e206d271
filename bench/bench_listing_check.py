"""The schema check of one 50-tool `tools/list` page: the poller's (`schema.py`) against the SDK's.

Goal (issue 28): the poller's CPU per poll at most 1.5x the raw client's. The SDK's session checks
every page by validating it into the wire models and dumping them back to a dict nobody reads;
monitor/collect/client/schema.py checks a `tools/list` page without the dump. Both run here on the
pages `raw_fleet.py` serves (its 50 listings of 50 tools, parsed as the transport parses an answer),
at 2025-11-25 (what the fleet speaks) and 2026-07-28, in alternating rounds of the same run; the
figure is the median round's process CPU per page, with the garbage collector as `serve` sets it.

    python bench/bench_listing_check.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import common  # noqa: F401  (the import path: the repository root and tests/)
import pydantic_core
from raw_fleet import listings

from monitor.collect.client import schema
from monitor.service.runtime import long_running_heap

TOOLS = 50
PASSES = 4
"""Times each round checks every one of the 50 pages."""
CACHE_HINTS = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


def pages(version: str) -> list[dict[str, Any]]:
    hints = CACHE_HINTS if version == "2026-07-28" else {}
    return [pydantic_core.from_json(json.dumps({**hints, "tools": tools})) for tools in listings(TOOLS)]


def cpu_ms_per_page(check: Callable[..., None], version: str, served: list[dict[str, Any]]) -> float:
    started = time.process_time()
    for _ in range(PASSES):
        for page in served:
            check("tools/list", version, page)
    return (time.process_time() - started) / (PASSES * len(served)) * 1000


def main(rounds: int = 21) -> list[tuple[str, float, float, str]]:
    rows = []
    with long_running_heap():
        for version in ("2025-11-25", "2026-07-28"):
            served = pages(version)
            ours: list[float] = []
            sdk: list[float] = []
            for _ in range(rounds):
                sdk.append(cpu_ms_per_page(schema.sdk_validate_server_result, version, served))
                ours.append(cpu_ms_per_page(schema.validate_server_result, version, served))
            mine, theirs = statistics.median(ours), statistics.median(sdk)
            print(
                f"{version}: {TOOLS}-tool page checked in {mine:.3f} ms CPU (the SDK's check: "
                f"{theirs:.3f} ms; min {min(ours):.3f} / {min(sdk):.3f} over {rounds} rounds)"
            )
            rows.append((f"check a {TOOLS}-tool page, {version} (ms) vs SDK", mine, theirs, "< the SDK's"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    main(parser.parse_args().rounds)
