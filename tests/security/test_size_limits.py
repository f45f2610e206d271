"""Size limits: request bodies the web app will read, and listings the poller will take.

`[monitor] max_request_bytes` (default 32 MiB: a host session report carries a whole listing) caps
every request body, 413 above it; dashboard forms have their own 16 KiB cap. Listings are capped by
`max_listing_bytes`, `max_tools` and `max_pages`, and an HTTP answer is cut off as it arrives at
twice `max_listing_bytes`, so a huge one is never buffered whole.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from support import faulty_http, http_server, numbered_tools, server_command
from support.web import AUTH, TOKEN, TOKEN_ENV, web_client

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import Store
from monitor.store.models import PollAttempt, Snapshot, ToolDefinition

LIMIT = 64 * 1024


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    config = Config(monitor=MonitorSettings(api_token_env=TOKEN_ENV, max_request_bytes=LIMIT))
    with web_client(store, config, clock=None, auth=None, follow_redirects=False) as test_client:
        yield test_client


def session_report(tool_count: int) -> dict[str, object]:
    tools = numbered_tools(tool_count, "t{}", description="d" * 200)
    return {"server": "s", "session_id": "a", "connected_at": "2026-03-01T12:00:00Z", "tools": tools}


def test_request_bodies_over_the_limit_are_refused_with_413(client: TestClient) -> None:
    """A session report over max_request_bytes: declared by Content-Length, sent chunked without one,
    and declared huge while the bytes sent are few. Must hold: 413 with a JSON detail naming the limit,
    for each; a body just under the limit is read (and judged on its content: 404, no such server);
    without the token, 401 comes first, so an anonymous body is never read at all."""
    big = json.dumps(session_report(400)).encode()
    assert len(big) > LIMIT
    declared = client.post(
        "/api/v1/sessions", content=big, headers={**AUTH, "content-type": "application/json"}
    )
    assert declared.status_code == 413, declared.text
    assert declared.json() == {"detail": f"the request body is over the {LIMIT}-byte limit"}

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 4096):
            yield big[start : start + 4096]

    chunked = client.post(
        "/api/v1/sessions", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert chunked.status_code == 413, chunked.text
    lying = client.post(
        "/api/v1/sessions",
        content=b"{}",
        headers={**AUTH, "content-type": "application/json", "content-length": str(10**12)},
    )
    assert lying.status_code == 413
    small = json.dumps(session_report(100)).encode()
    assert len(small) < LIMIT
    assert (
        client.post(
            "/api/v1/sessions", content=small, headers={**AUTH, "content-type": "application/json"}
        ).status_code
        == 404
    )
    anonymous = client.post("/api/v1/sessions", content=big, headers={"content-type": "application/json"})
    assert anonymous.status_code == 401


def test_dashboard_forms_have_their_own_smaller_cap(client: TestClient) -> None:
    """A sign-in form over 16 KiB (under the API limit) and one over the API limit. Must hold: both
    are refused (403 "too large", or 413) and neither signs anyone in."""
    for size in (20 * 1024, LIMIT + 1):
        response = client.post("/login", data={"token": TOKEN, "csrf_token": "x", "pad": "p" * size})
        assert response.status_code in (403, 413), (size, response.status_code)
        assert not signed_in(client, response), "a refused sign-in signed someone in"


def signed_in(client: TestClient, response: Any) -> bool:
    """Whether the response hands out a session someone signed in to (an anonymous one, which every
    page gives a first visit for its forms, is nobody's)."""
    cookie = response.cookies.get("dm_session")
    signer = client.app.state.web.identity.signer  # type: ignore[attr-defined]
    session = signer.read_session(cookie, time.time()) if cookie else None
    return session is not None and bool(session.who)


@pytest.fixture
def big_listing_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(
        json.dumps(numbered_tools(12, "tool{}")),
        encoding="utf-8",
    )
    return path


async def test_listing_limits_hold_through_the_poller(store: Store, big_listing_file: Path) -> None:
    """Servers over each listing limit, configured through [monitor] as an operator would: a 2 MB
    stdio page and a 50 MB HTTP answer against max_listing_bytes = 1 MiB, 12 tools against
    max_tools = 5, an endless cursor against max_pages = 4. Must hold: each is one recorded `limit`
    error saying which limit; the 50 MB answer is refused by the length its headers declare, over
    the 2 MiB cap, before its body is read; nothing is stored."""
    command, *args = server_command("hostile_server.py", "huge", "--huge-bytes", "2000000")
    endless, *endless_args = server_command("hostile_server.py", "endless-cursor")
    with (
        http_server("fastmcp_server.py", str(big_listing_file), "--page-size", "3") as many_tools,
        faulty_http() as (base, _),
    ):
        config = Config(
            monitor=MonitorSettings(
                max_listing_bytes=1024 * 1024, max_tools=5, max_pages=4, poll_timeout=20.0
            ),
            servers=[
                ServerConfig(name="big-page", transport="stdio", command=command, args=args),
                ServerConfig(name="huge-answer", transport="http", url=f"{base}/huge/mcp"),
                ServerConfig(name="many-tools", transport="http", url=many_tools),
                ServerConfig(name="many-pages", transport="stdio", command=endless, args=endless_args),
            ],
        )
        poller = Poller(store, config)
        try:
            outcomes = {o.server: o for o in await poller.poll(poller.jobs())}
        finally:
            poller.close()
    huge = outcomes.pop("huge-answer")
    declared = (
        r"listing exceeds 1048576 bytes: the answer to tools/list declared \d{8} bytes in its Content-Length"
    )
    assert huge.error_kind == "limit" and re.fullmatch(declared, huge.error or ""), huge
    expected = {
        "big-page": "listing exceeds 1048576 bytes (at page 1)",
        "many-tools": "listing exceeds 5 tools (at page 2)",
        "many-pages": "listing exceeds 4 pages (cursor loop?)",
    }
    for name, message in expected.items():
        assert (outcomes[name].error_kind, outcomes[name].error) == ("limit", message), outcomes[name]
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Snapshot)) == 0
        assert session.scalar(select(func.count()).select_from(ToolDefinition)) == 0
        kinds = session.scalars(select(PollAttempt.error_kind)).all()
    assert kinds == ["limit"] * 4
