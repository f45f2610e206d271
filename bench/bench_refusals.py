"""Memory while refusing oversized listings: a server that answers every poll with 20 MB.

Goal (issue 16): under 300 MB resident for repeated 20 MB listings, refused at the default
`max_listing_bytes` (16 MiB). A child process polls the hostile server (tests/servers/
hostile_server.py, mode `huge`, over Streamable HTTP) ROUNDS times, then CONCURRENT at once, and
reports its peak resident size; the baseline is the same child polling a small listing.

    python bench/bench_refusals.py
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import common  # noqa: F401  (the import path: the repository root and tests/)
from support import http_server

ROUNDS = 8
CONCURRENT = 8
LISTING_BYTES = 20_000_000
GOAL_MB = 300.0


def _child(url: str) -> None:
    """Poll `url` ROUNDS times in a row and CONCURRENT times at once; print outcomes and peak RSS."""
    from monitor.collect.client import Limits, PollError, Target, fetch_listing

    target = Target(name="bench", transport="http", url=url)

    async def one() -> str:
        try:
            listing = await fetch_listing(target, Limits(timeout=120))
        except PollError as exc:
            return str(exc.kind)
        return f"ok ({len(listing.tools)} tools)"

    async def run() -> list[str]:
        kinds = [await one() for _ in range(ROUNDS)]
        kinds += await asyncio.gather(*(one() for _ in range(CONCURRENT)))
        return kinds

    kinds = asyncio.run(run())
    status = Path("/proc/self/status").read_text()
    peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    print(json.dumps({"outcomes": kinds, "peak_mb": peak_kb / 1024}))


def measure(mode: str) -> tuple[float, list[str]]:
    with http_server("hostile_server.py", mode, "--huge-bytes", str(LISTING_BYTES)) as url:
        output = subprocess.run(
            [sys.executable, __file__, "--child", url],
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        ).stdout
    result = json.loads(output.strip().splitlines()[-1])
    return float(result["peak_mb"]), list(result["outcomes"])


def main() -> list[tuple[str, float, float, str]]:
    refusing, outcomes = measure("huge")
    small, _ = measure("legacy-only")
    print(f"outcomes polling a {LISTING_BYTES / 1e6:g} MB listing: {sorted(set(outcomes))}")
    print(
        f"peak RSS refusing {ROUNDS} in a row + {CONCURRENT} at once: {refusing:.0f} MB "
        f"(small listing: {small:.0f} MB)"
    )
    return [("peak RSS refusing 20 MB listings MB (base=goal)", refusing, GOAL_MB, ">=1: under 300 MB")]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        for figure, ours, baseline, goal in main():
            print(
                f"{figure}: ours {ours:.2f}, baseline {baseline:.2f}, "
                f"ratio {baseline / ours:.2f}x, goal {goal}"
            )
