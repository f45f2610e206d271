"""A change is diffed once, when it is recorded: pages render what its findings stored, and findings
keep bounded values, whatever size of schema a server sends.

Before: the diff and tool pages ran the schema diff again on every view (7-9 s of CPU for a 2.7 MB
listing whose one tool has 100,000 properties, all changed), and a finding of that change stored the
whole old and new schema, which the API, webhooks and pages then carried for every read.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from support import record_poll, tool
from support.web import web_client

from monitor.config import ServerConfig
from monitor.core.findings import VALUE_KEPT
from monitor.store import Store
from monitor.store.models import FindingRecord
from monitor.store.registration import sync_servers

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PAGES = ("/servers/s/diff?from=1&to=2", "/servers/s/tools/bulk")


def bulk(kind: str, properties: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {f"field_{i:06d}": {"type": kind} for i in range(properties)}}
    return tool("bulk", description="Bulk import.", input_schema=schema)


def recorded(store: Store, properties: int) -> TestClient:
    """Two versions of one tool whose every property changed type, recorded as a poll records them."""
    server_id = sync_servers(
        store, [ServerConfig(name="s", transport="http", url="http://127.0.0.1:9/")], T0
    )["s"]
    record_poll(store, server_id, [bulk("string", properties)], T0)
    record_poll(store, server_id, [bulk("integer", properties)], T0 + timedelta(hours=1))
    return web_client(store)


def schema_finding_rows(store: Store, rows: list[dict[str, Any]], omitted: int) -> None:
    """Replace what the input-schema finding stored, so a page can only show it by reading it."""
    with store.sessions.begin() as session:
        finding = session.scalars(
            select(FindingRecord).where(FindingRecord.rule == "input-schema-changed")
        ).one()
        finding.detail = {"schema_diff": rows, "schema_diff_omitted": omitted}


@pytest.mark.parametrize("page", PAGES)
def test_pages_show_the_schema_rows_the_finding_stored(store: Store, page: str) -> None:
    client = recorded(store, 3)
    stored = [{"path": "properties.stored_row_only", "op": "changed", "old": "was", "new": "is"}]
    schema_finding_rows(store, stored, 41_999)
    text = client.get(page).text
    assert "<code>properties.stored_row_only</code>" in text
    assert "<code>properties.field_000000.type</code>" not in text, "the schema was diffed again for the view"
    assert "41,999 more inputSchema changes not shown" in text


@pytest.mark.parametrize("page", PAGES)
def test_without_findings_a_page_walks_only_as_far_as_it_shows(store: Store, page: str) -> None:
    """Findings pruned (or stored by a release that kept no rows): the first rows, and "more"."""
    client = recorded(store, 300)
    with store.sessions.begin() as session:
        session.execute(delete(FindingRecord))
    text = client.get(page).text
    shown = re.findall(r"<code>properties\.field_(\d{6})\.type</code>", text)
    assert shown == [f"{i:06d}" for i in range(200)]
    assert "More inputSchema changes not shown" in text


def test_a_finding_keeps_a_marker_for_a_huge_old_or_new_value(store: Store) -> None:
    client = recorded(store, 20_000)
    (finding,) = [
        f
        for f in client.get("/api/v1/changes", params={"server": "s"}).json()["items"]
        if f["to_version"] == 2
    ]
    assert finding["rule"] == "input-schema-changed"
    for side, kind in (("old", "string"), ("new", "integer")):
        value = bulk(kind, 20_000)["inputSchema"]
        data = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
        assert len(data) > VALUE_KEPT
        assert finding[side] == {
            "$omitted": f"a JSON value of {len(data):,} bytes, over the {VALUE_KEPT:,} a finding keeps",
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    assert len(finding["detail"]["schema_diff"]) == 500


def test_small_old_and_new_values_are_kept_whole(store: Store) -> None:
    client = recorded(store, 3)
    items = client.get("/api/v1/changes", params={"server": "s"}).json()["items"]
    (finding,) = [f for f in items if f["rule"] == "input-schema-changed"]
    assert finding["old"] == bulk("string", 3)["inputSchema"]
    assert finding["new"] == bulk("integer", 3)["inputSchema"]
