"""Huge answers, accepted or refused, are read and parsed one at a time, so memory stays bounded.

Refusing repeated 20 MB listings held 1.1-1.2 GB: each costs several times its size while it is
parsed and measured, and polls of many such servers ran at once. What must hold: however many polls
receive an answer over `LARGE_ANSWER_BYTES` at once, at most one holds it past that point, and each
still gets its listing (or its refusal). bench/bench_refusals.py measures the resident size.
"""

from __future__ import annotations

import asyncio

import pytest
from support import http_server, numbered_tools

from monitor.collect.client import Limits, PollError, Target, fetch_listing
from monitor.collect.client.http import json_size
from monitor.collect.client.poll import Poll


@pytest.mark.parametrize("max_bytes", [16 * 1024 * 1024, 5 * 1024 * 1024])
def test_large_answers_are_taken_one_at_a_time(monkeypatch: pytest.MonkeyPatch, max_bytes: int) -> None:
    holding: list[int] = [0]
    most: list[int] = [0]
    take, end = Poll._large_answer, Poll._end_large_answer

    async def counted_take(self: Poll) -> None:
        held = self.large_turn is not None
        await take(self)
        if not held:
            holding[0] += 1
            most[0] = max(most[0], holding[0])

    def counted_end(self: Poll) -> None:
        if self.large_turn is not None:
            holding[0] -= 1
        end(self)

    monkeypatch.setattr(Poll, "_large_answer", counted_take)
    monkeypatch.setattr(Poll, "_end_large_answer", counted_end)
    with http_server("hostile_server.py", "huge", "--huge-bytes", "6000000") as url:
        target = Target(name="huge", transport="http", url=url)

        async def one() -> str:
            try:
                listing = await fetch_listing(target, Limits(timeout=120, max_bytes=max_bytes))
            except PollError as exc:
                return str(exc.kind)
            return f"{len(listing.tools)} tools"

        async def run() -> list[str]:
            return list(await asyncio.gather(*(one() for _ in range(4))))

        outcomes = asyncio.run(run())
    expected = "600 tools" if max_bytes > 6_000_000 else "limit"
    assert outcomes == [expected] * 4
    assert most[0] == 1, "one large answer at a time"
    assert holding[0] == 0, "every turn given back"


def test_an_answer_over_the_limit_is_measured_and_refused_before_the_sdk_parses_it() -> None:
    """The SDK's validating parse of a 20 MB answer cost about ten times its size, only for the
    listing to be refused after it; such an answer is now measured as it is (compact JSON) first."""
    with http_server("hostile_server.py", "huge", "--huge-bytes", "3000000") as url:
        target = Target(name="huge", transport="http", url=url)
        with pytest.raises(PollError) as raised:
            asyncio.run(fetch_listing(target, Limits(timeout=120, max_bytes=2_000_000)))
    tools = numbered_tools(300, "big{}", description="x" * 10_000)
    size = json_size({"tools": tools})
    assert (raised.value.kind, raised.value.message) == (
        "limit",
        f"listing exceeds 2000000 bytes: the answer to tools/list holds {size} bytes of compact JSON",
    )
