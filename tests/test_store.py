"""Storage and polling against real servers, on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from support import http_server, record_poll, tool

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import PollOutcome, Store, queries
from monitor.store.marks import from_epoch_ms
from monitor.store.models import (
    Base,
    FindingRecord,
    Listing,
    ListingTool,
    PollAttempt,
    PollMark,
    Server,
    Snapshot,
    ToolDefinition,
)
from monitor.store.queries.servers import recent_attempts
from monitor.store.registration import sync_servers


def make_tools(count: int) -> list[dict[str, Any]]:
    return [
        tool(
            f"tool_{i:03d}",
            description=f"Tool number {i}.",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            annotations={"readOnlyHint": True, "x-unknown-hint": i},
            **{"x-vendor": {"rev": 1}},
        )
        for i in range(count)
    ]


def count(engine: Engine, model: type[Base]) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(model)) or 0)


def poll(store: Store, servers: list[ServerConfig], **monitor: Any) -> list[PollOutcome]:
    config = Config(monitor=MonitorSettings(poll_timeout=15, **monitor), servers=servers, source="test")
    poller = Poller(store, config)
    try:
        return asyncio.run(poller.poll(poller.jobs()))
    finally:
        poller.close()


def http_config(name: str, url: str) -> ServerConfig:
    return ServerConfig(name=name, transport="http", url=url)


def test_third_party_server_over_stdio(store: Store, engine: Engine) -> None:
    time_server = ServerConfig(
        name="time", transport="stdio", command=sys.executable, args=["-m", "mcp_server_time"]
    )
    (first,) = poll(store, [time_server])
    assert first.ok, first.error
    assert first.new_version and first.version == 1 and first.tool_count >= 1
    (second,) = poll(store, [time_server])
    assert second.ok and not second.new_version and second.version == 1
    assert second.fingerprint == first.fingerprint
    assert count(engine, Snapshot) == 1
    with store.sessions() as session:
        snapshot = session.scalars(select(Snapshot)).one()
        assert snapshot.poll_count == 2
        server = session.scalars(select(Server)).one()
        assert server.server_info and server.server_info.get("name")
        assert server.protocol_version


def test_read_only_flip_stores_one_tool_and_a_critical_finding(
    store: Store, engine: Engine, tmp_path: Path
) -> None:
    tools = make_tools(50)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools))
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "20") as url:
        server = http_config("docs", url)
        (first,) = poll(store, [server])
        assert first.ok and first.tool_count == 50, first.error
        assert count(engine, ToolDefinition) == 50
        before = {m: count(engine, m) for m in (ToolDefinition, Listing, ListingTool, Snapshot)}

        tools[7]["annotations"]["readOnlyHint"] = False
        tools_file.write_text(json.dumps(tools))
        (second,) = poll(store, [server])

    assert second.ok and second.new_version and second.version == 2
    assert count(engine, ToolDefinition) == before[ToolDefinition] + 1
    assert count(engine, Listing) == before[Listing] + 1
    assert count(engine, Snapshot) == before[Snapshot] + 1
    assert [(f.rule, f.severity.value, f.tool) for f in second.findings] == [
        ("read-only-revoked", "critical", "tool_007"),
        ("changed-without-version-bump", "low", None),  # the test server's serverInfo.version stays
    ]
    with store.sessions() as session:
        record = session.scalars(select(FindingRecord).where(FindingRecord.tool.is_not(None))).one()
        snapshots = session.scalars(select(Snapshot).order_by(Snapshot.version)).all()
        assert (record.from_snapshot_id, record.to_snapshot_id) == (snapshots[0].id, snapshots[1].id)
        assert (record.old, record.new) == (True, False)


def test_vendor_fields_and_unknown_hints_are_kept_and_versioned(store: Store, tmp_path: Path) -> None:
    tools = make_tools(3)
    tools[0]["_meta"] = {"volatile": 1}
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools))
    with http_server("fastmcp_server.py", str(tools_file)) as url:
        server = http_config("vendor", url)
        (first,) = poll(store, [server])
        tools[0]["_meta"] = {"volatile": 2}
        tools_file.write_text(json.dumps(tools))
        (meta_only,) = poll(store, [server])
        tools[1]["x-vendor"]["rev"] = 2
        tools_file.write_text(json.dumps(tools))
        (vendor,) = poll(store, [server])
        tools[2]["annotations"]["x-unknown-hint"] = "changed"
        tools_file.write_text(json.dumps(tools))
        (hint,) = poll(store, [server])

    assert first.ok, first.error
    assert not meta_only.new_version, "_meta is not part of identity"
    assert [(f.rule, f.severity, f.tool) for f in meta_only.findings] == [
        ("meta-changed", "info", "tool_000")
    ]
    assert vendor.new_version and [f.field for f in vendor.findings if f.tool] == ["x-vendor"]
    assert hint.new_version and [f.field for f in hint.findings if f.tool] == ["annotations.x-unknown-hint"]
    with store.sessions() as session:
        snapshot = session.scalars(select(Snapshot).where(Snapshot.version == 1)).one()
    with store.sessions() as session:
        stored = queries.listing_tools(session, snapshot.listing_id, snapshot.id)
    expected = make_tools(3)
    expected[0]["_meta"] = {"volatile": 2}
    assert sorted(stored, key=lambda t: t["name"]) == expected, "as sent, _meta as last sent in version 1"


def test_unreachable_after_three_failures_then_recovery(store: Store, engine: Engine, tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(make_tools(1)))
    dead = http_config("flaky", "http://127.0.0.1:9/mcp")
    outcomes = [poll(store, [dead], unreachable_after=3)[0] for _ in range(4)]
    assert all(not o.ok and o.error_kind == "connect" for o in outcomes)
    assert [[f.rule for f in o.findings] for o in outcomes] == [[], [], ["server-unreachable"], []]
    with http_server("fastmcp_server.py", str(tools_file)) as url:
        (recovered,) = poll(store, [http_config("flaky", url)])
    assert recovered.ok
    with store.sessions() as session:
        server = session.scalars(select(Server)).one()
        assert server.consecutive_failures == 0 and server.last_error is None
        failures = session.scalars(select(PollAttempt).where(PollAttempt.ok.is_(False))).all()
        assert len(failures) == 4 and all("connection refused" in (a.error or "") for a in failures)


def test_unchanged_polls_keep_a_span_and_trim_attempts(store: Store, engine: Engine) -> None:
    server_id = sync_servers(store, [http_config("s", "http://127.0.0.1:9/mcp")], datetime.now(UTC))["s"]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for minute in range(12):
        record_poll(store, server_id, make_tools(5), start + timedelta(minutes=minute))
    assert count(engine, Snapshot) == 1
    assert count(engine, PollAttempt) == 1, "a full row for the poll that stored the version"
    with store.sessions() as session:
        marks = session.scalars(select(PollMark.started_ms).order_by(PollMark.started_ms)).all()
        recent = recent_attempts(session, server_id, limit=3)
    assert [from_epoch_ms(ms) for ms in marks] == [start + timedelta(minutes=m) for m in range(7, 12)], (
        "a compact mark for each of the newest attempts_kept unchanged polls"
    )
    assert [a.started_at for a in recent] == [start + timedelta(minutes=m) for m in (11, 10, 9)]
    with store.sessions() as session:
        snapshot = session.scalars(select(Snapshot)).one()
        assert snapshot.poll_count == 12
        assert snapshot.first_seen == start and snapshot.last_seen == start + timedelta(minutes=11)


def test_snapshot_in_force_at_a_time(store: Store) -> None:
    server_id = sync_servers(store, [http_config("s", "http://127.0.0.1:9/mcp")], datetime.now(UTC))["s"]
    times = [datetime(2026, 1, 1, 14, m, tzinfo=UTC) for m in (0, 10, 20)]
    for size, at in zip((1, 2, 1), times, strict=True):
        record_poll(store, server_id, make_tools(size), at)
    with store.sessions() as session:
        assert queries.snapshot_at(session, "s", datetime(2026, 1, 1, 13, 59, tzinfo=UTC)) is None
        versions = [
            queries.snapshot_at(session, "s", datetime(2026, 1, 1, 14, m, s, tzinfo=UTC))
            for m, s in ((0, 0), (9, 59), (10, 0), (30, 0))
        ]
    assert [v.snapshot.version if v else None for v in versions] == [1, 1, 2, 3]
    assert (
        versions[0] and versions[3] and versions[0].snapshot.listing_id == versions[3].snapshot.listing_id
    ), "A -> B -> A stores A once"


def test_a_failure_mid_poll_leaves_nothing_half_written(
    store: Store, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from monitor.store import polls as store_module

    server_id = sync_servers(store, [http_config("s", "http://127.0.0.1:9/mcp")], datetime.now(UTC))["s"]
    at = datetime(2026, 1, 1, tzinfo=UTC)
    record_poll(store, server_id, make_tools(2), at)
    before = {
        m: count(engine, m)
        for m in (ToolDefinition, Listing, ListingTool, Snapshot, FindingRecord, PollAttempt)
    }

    def crash(*args: Any, **kw: Any) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(store_module, "store_findings", crash)
    changed = make_tools(2)
    changed[0]["annotations"]["readOnlyHint"] = False
    with pytest.raises(RuntimeError, match="power cut"):
        record_poll(store, server_id, changed, at)
    after = {m: count(engine, m) for m in before}
    assert after == before
