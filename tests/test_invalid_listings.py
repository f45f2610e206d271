"""Listings hosts reject are kept (docs/contract.md sections 2 and 4): a schema-breaking listing is a
version with its errors and a `listing-invalid` finding; a listing that cannot be read keeps its raw
payload."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from support import http_server, record_poll, tool
from support.web import web_client

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store, queries
from monitor.store.models import Alert, PollAttempt, Snapshot
from monitor.store.registration import sync_servers

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

NO_TYPE = tool("read_file", description="Read a file.", input_schema={"properties": {"path": {}}})
"""What server-filesystem 2025.3.28 sent: an inputSchema without `"type": "object"`."""


def poll(store: Store, url: str) -> PollOutcome:
    config = Config(
        monitor=MonitorSettings(poll_timeout=15),
        servers=[ServerConfig(name="files", transport="http", url=url)],
        source="test",
    )
    poller = Poller(store, config)
    try:
        (outcome,) = asyncio.run(poller.poll(poller.jobs()))
        return outcome
    finally:
        poller.close()


def test_a_listing_hosts_reject_is_stored_as_a_version_with_its_errors(
    engine: Engine, tmp_path: Path
) -> None:
    alerting = Alerting(base_url="http://127.0.0.1:8000")
    store = Store(engine, hooks=[alerting])
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([NO_TYPE]))
    with http_server("fastmcp_server.py", str(tools_file)) as url:
        first = poll(store, url)
        assert first.ok and first.version == 1, first.error
        assert [(f.rule, f.severity.value) for f in first.findings] == [("listing-invalid", "high")]
        assert (
            "inputSchema" in first.findings[0].message
            and "hosts that validate will reject" in first.findings[0].message
        )
        with store.sessions() as session:
            snapshot = session.scalars(select(Snapshot)).one()
            assert snapshot.validation_errors and any("inputSchema" in e for e in snapshot.validation_errors)
        with store.sessions() as session:
            assert queries.listing_tools(session, snapshot.listing_id, snapshot.id) == [NO_TYPE], (
                "kept exactly as sent"
            )
        with store.sessions() as session:
            (alert,) = session.scalars(select(Alert)).all()
            assert (alert.rule, alert.state) == ("listing-invalid", "open")

        fixed = {**NO_TYPE, "inputSchema": {"type": "object", "properties": {"path": {}}}}
        tools_file.write_text(json.dumps([fixed]))
        second = poll(store, url)
        assert (
            second.ok and second.version == 2 and "listing-invalid" not in [f.rule for f in second.findings]
        )
        with store.sessions() as session:
            (alert,) = session.scalars(select(Alert)).all()
            assert alert.state == "resolved", "a valid new version resolves it"
            assert (
                session.scalars(select(Snapshot).where(Snapshot.version == 2)).one().validation_errors is None
            )


def test_a_paged_listing_records_each_violation_once(store: Store, tmp_path: Path) -> None:
    """A listing of several pages is read twice (two passes must agree): the violations recorded are
    the recorded pass's, not every pass's, so one bad tool is one error and the cap holds for it."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([tool("ok", description="Fine."), NO_TYPE]))
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "1") as url:
        outcome = poll(store, url)
    assert outcome.ok, outcome.error
    with store.sessions() as session:
        errors = session.scalars(select(Snapshot)).one().validation_errors
    assert errors is not None and len(errors) == 1 and "inputSchema" in errors[0], errors


def test_a_listing_that_cannot_be_read_keeps_its_raw_payload(store: Store, tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    duplicated: list[dict[str, Any]] = [tool("same"), tool("same", description="Again.")]
    tools_file.write_text(json.dumps(duplicated))
    with http_server("fastmcp_server.py", str(tools_file)) as url:
        outcome = poll(store, url)
    assert (
        not outcome.ok
        and outcome.error_kind == "malformed"
        and "duplicate tool name" in (outcome.error or "")
    )
    with store.sessions() as session:
        attempt = session.scalars(select(PollAttempt)).one()
    assert attempt.raw_payload is not None and json.loads(attempt.raw_payload) == {"tools": duplicated}
    with web_client(store) as client:
        link = f"/servers/files/polls/{attempt.id}/raw"
        assert f'href="{link}"' in client.get("/servers/files").text
        raw = client.get(link)
        assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
        assert raw.headers["x-content-type-options"] == "nosniff"
        assert json.loads(raw.text) == {"tools": duplicated}
        assert client.get(f"/servers/files/polls/{attempt.id + 1}/raw").status_code == 404
        assert client.get("/servers/files/polls/x/raw").status_code == 422


def test_changed_without_version_bump(store: Store) -> None:
    server_id = sync_servers(
        store, [ServerConfig(name="git", transport="http", url="http://127.0.0.1:9/")], T0
    )["git"]
    info = {"name": "git", "version": "1.2.0"}
    record_poll(store, server_id, [tool("log", read_only=True)], T0, server_info=info)
    same = record_poll(
        store, server_id, [tool("log", read_only=False)], T0 + timedelta(minutes=1), server_info=info
    )
    (bump,) = [f for f in same.findings if f.rule == "changed-without-version-bump"]
    assert bump.severity.value == "low" and "'1.2.0'" in bump.message
    bumped = record_poll(
        store, server_id, [tool("log")], T0 + timedelta(minutes=2), server_info={**info, "version": "1.3.0"}
    )
    assert "changed-without-version-bump" not in [f.rule for f in bumped.findings]
    unnamed = record_poll(store, server_id, [tool("log", read_only=True)], T0 + timedelta(minutes=3))
    assert "changed-without-version-bump" not in [f.rule for f in unnamed.findings], "no version: no claim"


T0 = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)
