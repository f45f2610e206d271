"""POST /api/v1/fingerprint: hosts that would rather send the tools get the fingerprint the monitor stores."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from support.servers import SERVERS
from support.web import web_client
from support.world import World, versions

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.fingerprint import fingerprint, tool_fingerprint
from monitor.store import Store
from monitor.store.models import PollAttempt

VECTORS = json.loads((Path(__file__).parent / "data" / "fingerprint-vectors.json").read_text("utf-8"))[
    "vectors"
]


def test_every_vector_through_the_api(client: TestClient) -> None:
    for vector in VECTORS:
        answer = client.post("/api/v1/fingerprint", json={"tools": vector["tools"]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["fingerprint"] == vector["fingerprint"], vector["name"]
        assert body["tool_count"] == len(vector["tools"]) and body["server"] is None
        assert body["tools"] == {t["name"]: tool_fingerprint(t) for t in vector["tools"]}


def test_a_tools_list_result_names_the_version_it_is(client: TestClient, world: World) -> None:
    """A host sends its cached result (with `nextCursor`-less extras like `ttlMs`) and the server name."""
    old, current = versions()[0], versions()[-1]
    answer = client.post(
        "/api/v1/fingerprint", json={"tools": old, "ttlMs": 60000, "cacheScope": "public", "server": "search"}
    ).json()
    assert answer["fingerprint"] == fingerprint(old) == world.fingerprints[0]
    assert answer["server"] == {
        "name": "search",
        "current_version": 4,
        "current_fingerprint": fingerprint(current),
        "matches_current": False,
        "version": 1,
    }
    same = client.post("/api/v1/fingerprint", json={"tools": current, "server": "search"}).json()
    assert same["server"]["matches_current"] is True and same["server"]["version"] == 4
    unknown = client.post("/api/v1/fingerprint", json={"tools": current, "server": "nope"})
    assert unknown.status_code == 404


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"tools": [{"name": "a\\ud800"}]}', "tools[0].name: a string holds a lone surrogate"),
        ('{"tools": [{"name": "a", "x": NaN}]}', "tools[0].x: NaN is not a JSON number"),
        ('{"tools": [{"name": "a"}, {"name": "a"}]}', "duplicate tool name 'a'"),
        ('{"tools": [{"title": "no name"}]}', "tool has no string 'name'"),
    ],
)
def test_what_cannot_be_fingerprinted_is_a_422_that_says_where(
    client: TestClient, raw: str, says: str
) -> None:
    answer = client.post("/api/v1/fingerprint", content=raw, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    body: dict[str, Any] = answer.json()
    assert says in body["detail"]


def test_a_listing_that_is_not_i_json_is_malformed_and_kept_for_review(store: Store) -> None:
    """A real (hostile) server lists a NaN. Must hold: the poll is `malformed`, says where, and the
    payload is kept with each failed poll (its first 1 MiB) and the newest served for review; a
    listing is never dropped silently."""
    server = ServerConfig(
        name="odd",
        transport="stdio",
        command=sys.executable,
        args=[str(SERVERS / "hostile_server.py"), "not-i-json"],
    )
    config = Config(monitor=MonitorSettings(poll_timeout=20), servers=[server], source="test")
    poller = Poller(store, config)
    try:
        outcomes = [asyncio.run(poller.poll(poller.jobs()))[0] for _ in range(2)]
    finally:
        poller.close()
    assert [o.error_kind for o in outcomes] == ["malformed", "malformed"]
    assert outcomes[0].error == (
        "not I-JSON: tools[1].inputSchema.maximum: NaN is not a JSON number (NaN, infinite or out of range)"
    )
    with store.sessions() as session:
        kept = session.scalars(
            select(PollAttempt.raw_payload).where(PollAttempt.raw_payload.is_not(None))
        ).all()
    assert len(kept) == 2, "each malformed poll keeps what it was sent"
    with web_client(store) as client:
        answer = client.get("/api/v1/servers/odd/malformed").json()
    assert answer["error"] == outcomes[1].error
    assert json.loads(answer["payload"])["tools"][0]["name"] == "echo" and "NaN" in answer["payload"]
