"""Huge answers, accepted or refused, are read and parsed one at a time, so memory stays bounded;
those over the listing limit are measured in a child process; those declared over the cap are not read.

Refusing repeated 20 MB listings held 1.1-1.2 GB: each costs several times its size while it is
parsed and measured, and polls of many such servers ran at once. What must hold: however many polls
receive an answer over `LARGE_ANSWER_BYTES` at once, at most one holds it past that point, and each
still gets its listing (or its refusal). bench/bench_refusals.py measures the resident size.
"""

from __future__ import annotations

import asyncio
import re
import sys

import pytest
from sqlalchemy import select
from support import faulty_http, http_server, numbered_tools

from monitor.collect.client import Limits, PollError, Target, answersize, fetch_listing
from monitor.collect.client.answersize import json_size
from monitor.collect.client.poll import Poll
from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import Store
from monitor.store.models import PollAttempt


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


def test_an_answer_declared_over_the_cap_is_refused_before_its_body_is_read() -> None:
    """The server's headers declare a body of 1 GB; it sends the first bytes and waits. The answer is
    refused by the length it declares, as a body that grew past the cap is: reading it, the poll
    waited for the rest until its deadline."""
    with faulty_http() as (base, _):
        target = Target(name="overdeclared", transport="http", url=f"{base}/overdeclared/mcp")
        with pytest.raises(PollError) as raised:
            asyncio.run(fetch_listing(target, Limits(timeout=20, max_bytes=1_000_000)))
    assert (raised.value.kind, raised.value.message) == (
        "limit",
        "listing exceeds 1000000 bytes: the answer to tools/list declared 1000000000 bytes in its "
        "Content-Length",
    )


async def test_a_measure_whose_process_dies_fails_that_poll_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process measuring an answer over the limit is killed: that poll is a recorded `limit`
    failure that says so, and the next measure starts a process of its own."""
    with http_server("hostile_server.py", "huge", "--huge-bytes", "3000000") as url:
        config = Config(
            monitor=MonitorSettings(max_listing_bytes=2_000_000, poll_timeout=120),
            servers=[ServerConfig(name="huge", transport="http", url=url)],
            source="test",
        )
        poller = Poller(store, config)
        try:
            with monkeypatch.context() as patched:
                killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
                patched.setattr(answersize, "MEASURER", killed)
                (first,) = await poller.poll(poller.jobs())
            (second,) = await poller.poll(poller.jobs())
        finally:
            poller.close()
    died = (
        r"could not measure the answer to tools/list \(\d+ bytes as sent, over the 2000000-byte listing "
        r"limit\): the process measuring it was killed \(SIGKILL\)"
    )
    assert first.error_kind == "limit" and first.error is not None and re.fullmatch(died, first.error)
    size = json_size({"tools": numbered_tools(300, "big{}", description="x" * 10_000)})
    measured = f"listing exceeds 2000000 bytes: the answer to tools/list holds {size} bytes of compact JSON"
    assert (second.error_kind, second.error) == ("limit", measured)
    with store.sessions() as session:
        recorded = session.execute(select(PollAttempt.error_kind, PollAttempt.error).order_by(PollAttempt.id))
        assert [tuple(row) for row in recorded] == [("limit", first.error), ("limit", measured)]


def test_a_measure_cut_off_by_the_poll_deadline_ends_its_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The poll's deadline comes while the answer is measured (here, by a process that never
    answers): the poll times out, and its measuring process is killed and reaped with it (this
    suite fails a test that leaves a child process behind)."""
    monkeypatch.setattr(answersize, "MEASURER", [sys.executable, "-c", "import time; time.sleep(600)"])
    with http_server("hostile_server.py", "huge", "--huge-bytes", "3000000") as url:
        target = Target(name="huge", transport="http", url=url)
        with pytest.raises(PollError) as raised:
            asyncio.run(fetch_listing(target, Limits(timeout=5, max_bytes=2_000_000)))
    assert (raised.value.kind, raised.value.message) == ("timeout", "no answer to tools/list within 5 s")
