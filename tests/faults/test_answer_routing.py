"""What a poll does with messages that are not the plain answer to its request: a request the server
sends on an SSE answer before the listing, and an answer that names another request's id.

Both run on a poll's own HTTP client and on a kept one (`HttpClients`, as `serve` polls)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from support import faulty_http

from monitor.collect.client import Limits, PollError, Target, fetch_listing
from monitor.collect.client.clients import HttpClients
from monitor.core.states import PollErrorKind, ServerOrigin


@pytest.fixture(scope="module")
def faulty_base() -> Iterator[str]:
    with faulty_http() as (base, _silent):
        yield base


@pytest.fixture(params=["own client", "kept client"])
async def clients(request: pytest.FixtureRequest) -> AsyncIterator[HttpClients | None]:
    if request.param == "own client":
        yield None
        return
    kept = HttpClients(keepalive=60)
    yield kept
    await kept.aclose()


def target(base: str, mode: str) -> Target:
    return Target(name=mode, transport="http", url=f"{base}/{mode}/mcp", origin=ServerOrigin.CONFIG)


async def test_a_request_the_server_sends_before_the_listing_is_answered(
    faulty_base: str, clients: HttpClients | None
) -> None:
    """The server pings on its SSE answer to tools/list and lists "pinged" only once the client's
    answer to the ping arrived (else "unanswered", after a wait well inside the deadline)."""
    listing = await fetch_listing(target(faulty_base, "ping-first"), Limits(timeout=30), clients)
    assert [tool["name"] for tool in listing.tools] == ["pinged"]


async def test_an_answer_to_another_request_is_a_protocol_error_not_a_wait(
    faulty_base: str, clients: HttpClients | None
) -> None:
    """An answer whose id is not the request's is reported as what it is; waiting for the right one
    would end only at the deadline, as a timeout."""
    with pytest.raises(PollError) as failure:
        await fetch_listing(target(faulty_base, "wrong-id"), Limits(timeout=30), clients)
    assert failure.value.kind == PollErrorKind.PROTOCOL
    assert "server answered tools/list unusably: Response to another request" in failure.value.message
    assert "names id 1002" in failure.value.message
