"""One poll in a process of its own, for tests that measure what a poll costs in memory.

    python tests/support/childpoll.py URL

Polls the Streamable HTTP server at URL once with the default limits and prints one JSON line:
`{"kind": ..., "error": ..., "tools": ..., "peak_mb": ...}` (the process's peak resident size).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


def main(url: str) -> None:
    from monitor.collect.client import Limits, PollError, Target, fetch_listing

    result: dict[str, object] = {"kind": "ok", "error": None, "tools": None}
    try:
        listing = asyncio.run(
            fetch_listing(Target(name="child", transport="http", url=url), Limits(timeout=120))
        )
        result["tools"] = len(listing.tools)
    except PollError as exc:
        result.update(kind=str(exc.kind), error=exc.message)
    status = Path("/proc/self/status").read_text()
    peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    result["peak_mb"] = peak_kb / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
