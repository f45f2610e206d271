"""The answer-size cap counts decoded bytes: a compression bomb is a clear failure, not memory.

0.26 MB of gzip (or deflate, or under 1 KB of brotli) decoding to 256 MiB was a successful poll
that took 500 MB: httpx decodes when the SDK reads the body, after the cap had counted the
compressed bytes. Each poll runs in a child process of its own (tests/support/childpoll.py) that
reports its peak resident size; the baseline is the same child polling a small, uncompressed
listing on the same server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import faulty_http

CHILD = Path(__file__).resolve().parent.parent / "support" / "childpoll.py"
HEADROOM_MB = 100
"""What a refused bomb may cost over the baseline: the default cap is 32 MiB of decoded answer
(twice `max_listing_bytes`), which the poll holds while it arrives. Decoding the whole bomb costs
256 MiB at the least."""


def child_poll(url: str) -> dict[str, object]:
    output = subprocess.run(
        [sys.executable, str(CHILD), url], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    result: dict[str, object] = json.loads(output.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def faulty() -> object:
    with faulty_http() as (base, _):
        yield base


@pytest.mark.parametrize("mode", ["gzip-bomb", "deflate-bomb", "br-bomb"])
def test_a_compression_bomb_is_a_recorded_limit_failure_within_bounded_memory(faulty: str, mode: str) -> None:
    baseline = child_poll(f"{faulty}/rpc-error/mcp")  # answers initialize, then a small error
    bomb = child_poll(f"{faulty}/{mode}/mcp")
    assert bomb["kind"] == "limit", bomb
    assert bomb["error"] == (
        "listing exceeds 16777216 bytes: the answer to tools/list passed 33554432 bytes as it arrived"
    )
    assert float(bomb["peak_mb"]) < float(baseline["peak_mb"]) + HEADROOM_MB, (bomb, baseline)
