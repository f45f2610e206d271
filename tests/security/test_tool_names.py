"""A tool's name is chosen by the server: whatever its characters, its page and history are reachable.

Names with a newline or a NUL had no page (404), and links for `.` and `..` landed on another page
(dot segments are resolved by browsers and HTTP clients however they are encoded).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from support import record_poll, tool
from support.web import web_client

from monitor.config import ServerConfig
from monitor.store import Store
from monitor.store.registration import sync_servers

NAMES = [".", "..", "line\nbreak", "nul\x00byte", "a/../b", "%2e", "tab\there", " ", "~"]
IN_PATH = [name for name in NAMES if name not in (".", "..", "%2e")]
"""Names whose path form the test client carries as a browser does (it decodes a path twice, so
`%252e` would reach the app as `.`); `%2e` is checked through the query form."""
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def client(store: Store) -> TestClient:
    server_id = sync_servers(
        store, [ServerConfig(name="odd", transport="http", url="http://127.0.0.1:9/")], T0
    )["odd"]
    tools = [tool(name, description=f"marker-{index}-end") for index, name in enumerate(NAMES)]
    record_poll(store, server_id, tools, T0)
    return web_client(store)


def test_every_tool_link_on_the_server_page_opens_that_tools_page(client: TestClient) -> None:
    page = client.get("/servers/odd")
    assert page.status_code == 200
    hrefs = [unescape(h) for h in re.findall(r'href="(/servers/odd/tools?[/?][^"]*)"', page.text)]
    assert len(set(hrefs)) == len(NAMES), hrefs
    hrefs = [h for h in hrefs if "%252e" not in h]
    opened: set[str] = set()
    for href in sorted(set(hrefs)):
        response = client.get(href)
        assert response.status_code == 200, (href, response.text[:300])
        shown = re.findall(r"marker-(\d+)-end", response.text)
        assert len(set(shown)) == 1, (href, shown)
        opened.add(NAMES[int(shown[0])])
    assert opened == set(NAMES) - {"%2e"}, "each link opened its own tool's page"


@pytest.mark.parametrize("name", IN_PATH)
def test_the_history_api_answers_for_a_name_in_the_path(client: TestClient, name: str) -> None:
    response = client.get(f"/api/v1/servers/odd/tools/{quote(name, safe='')}/history")
    assert response.status_code == 200, response.text
    assert response.json()["tool"] == name


@pytest.mark.parametrize("name", NAMES)
def test_the_history_api_answers_for_any_name_in_the_query(client: TestClient, name: str) -> None:
    response = client.get("/api/v1/servers/odd/tool-history", params={"tool": name})
    assert response.status_code == 200, response.text
    assert response.json()["tool"] == name
