"""Whatever a server sends, every page stays a few MB: large definitions are collapsed with a size
note and a link to the raw JSON, long change tables are cut with a count, and the overview is paged.

Before: a 2.7 MB listing with a 100,000-property schema made a 57 MB diff page and a 64 MB tool
page; the 20,000 properties here made pages of over 10 MB.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support import record_poll, tool
from support.web import web_client

from monitor.config import ServerConfig
from monitor.core.diff import diff_listings
from monitor.core.rules.content import SCHEMA_ROWS_KEPT
from monitor.servers.overview import SERVERS_PER_PAGE
from monitor.store import Store
from monitor.store.registration import sync_servers

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PAGE_LIMIT = 3 * 1024 * 1024
"""What "a few MB" means here."""


def huge(kind: str) -> dict[str, Any]:
    properties = {f"field_{i:06d}": {"type": kind} for i in range(20_000)}
    return tool("bulk", description="Bulk import.", input_schema={"type": "object", "properties": properties})


@pytest.fixture
def client(store: Store) -> TestClient:
    server_id = sync_servers(
        store, [ServerConfig(name="big", transport="http", url="http://127.0.0.1:9/")], T0
    )["big"]
    record_poll(store, server_id, [huge("string")], T0)
    record_poll(store, server_id, [huge("integer")], T0 + timedelta(hours=1))
    return web_client(store)


@pytest.mark.parametrize("page", ["/servers/big/diff?from=1&to=2", "/servers/big/tools/bulk", "/servers/big"])
def test_a_huge_schema_makes_a_bounded_page_that_links_to_the_raw_json(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert len(response.content) < PAGE_LIMIT, f"{page}: {len(response.content):,} bytes"
    assert "Collapsed:" in response.text
    if "/diff" in page:
        assert re.search(r"19,?800 more inputSchema changes not shown", response.text)
    links = {
        unescape(h) for h in re.findall(r'href="(/servers/big/definitions/[0-9a-f]{64})"', response.text)
    }
    assert links
    for link in links:
        raw = client.get(link)
        assert raw.status_code == 200 and raw.headers["content-type"].startswith("application/json")
        assert len(raw.json()["inputSchema"]["properties"]) == 20_000


def test_a_definition_of_another_server_or_none_is_not_served(client: TestClient) -> None:
    assert client.get("/servers/big/definitions/" + "0" * 64).status_code == 404
    assert client.get("/servers/big/definitions/..%2F..%2Fetc").status_code == 404


def test_the_overview_is_paged(store: Store) -> None:
    count = SERVERS_PER_PAGE * 2 + 7
    sync_servers(
        store,
        [ServerConfig(name=f"s{i:05d}", transport="http", url="http://127.0.0.1:9/") for i in range(count)],
        T0,
    )
    client = web_client(store)
    rows = []
    for page in (1, 2, 3):
        text = client.get(f"/?page={page}").text
        rows += re.findall(r'<th scope="row"><a href="/servers/(s\d{5})">', text)
        assert f"of {count}" in text
    assert rows == [f"s{i:05d}" for i in range(count)]
    assert client.get("/?page=x").status_code == 422


def test_a_finding_keeps_a_bounded_number_of_schema_rows() -> None:
    (finding,) = diff_listings([huge("string")], [huge("integer")]).findings
    assert finding.rule == "input-schema-changed"
    assert len(finding.detail["schema_diff"]) == SCHEMA_ROWS_KEPT
    assert finding.detail["schema_diff_omitted"] == 20_000 - SCHEMA_ROWS_KEPT


def _with_default(default: Any) -> list[dict[str, Any]]:
    return [tool("t", input_schema={"type": "object", "default": default})]


@pytest.mark.parametrize(("old", "new"), [(True, 1), (0, False), ([1], [True])])
def test_schema_values_python_confuses_are_still_changes(old: Any, new: Any) -> None:
    rules = [finding.rule for finding in diff_listings(_with_default(old), _with_default(new)).findings]
    assert rules == ["input-schema-changed"]


@pytest.mark.parametrize(("old", "new"), [(1, 1.0), ({"a": 1}, {"a": 1.0})])
def test_numbers_json_cannot_tell_apart_are_no_change(old: Any, new: Any) -> None:
    """`1` and `1.0` are one JSON number (RFC 8785, fingerprint v2): no host can see a difference."""
    assert diff_listings(_with_default(old), _with_default(new)).findings == []
