"""The JSON API through the ASGI app, on SQLite and (when configured) PostgreSQL, over the history
`support.world.populate` records."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from support.polls import record_poll
from support.tools import tool
from support.web import AUTH, TOKEN, TOKEN_ENV, make_app, web_client
from support.world import HOSTILE_SCRIPT, QUERY, T0, World, populate, record, versions

from monitor.approvals.hosts import HOOK_PATHS
from monitor.config import ServerConfig
from monitor.core.fingerprint import CanonicalListing, fingerprint
from monitor.store import PollOutcome, Store
from monitor.store.models import FindingRecord, Server
from monitor.store.registration import sync_servers

SECRET_HEADER = "Bearer s3cr3t-header-value"


def test_servers_list_detail_and_pagination(client: TestClient, world: World) -> None:
    body = client.get("/api/v1/servers").json()
    assert [s["name"] for s in body["items"]] == ["files", "search"]
    assert body["next_before"] is None
    search = body["items"][1]
    assert search["status"] == "ok"
    assert search["current"]["version"] == 4
    assert search["current"]["fingerprint"] == world.fingerprints[3]
    assert search["open_alerts"]["critical"] == 1 and search["open_alerts"]["high"] == 1
    assert search["open_alerts"]["medium"] == 0  # acknowledged alerts are not open
    files = body["items"][0]
    assert files["status"] == "failing" and files["consecutive_failures"] == 3
    assert files["transport"] == "stdio" and files["command"] == "mcp-files"

    first = client.get("/api/v1/servers", params={"limit": 1}).json()
    assert [s["name"] for s in first["items"]] == ["files"] and first["next_before"] == "files"
    second = client.get("/api/v1/servers", params={"limit": 1, "before": first["next_before"]}).json()
    assert [s["name"] for s in second["items"]] == ["search"] and second["next_before"] is None

    detail = client.get("/api/v1/servers/search").json()
    assert detail == search
    missing = client.get("/api/v1/servers/nope")
    assert missing.status_code == 404 and missing.json() == {"detail": "no server named 'nope'"}


def test_times_are_iso_8601_utc(client: TestClient) -> None:
    search = client.get("/api/v1/servers/search").json()
    assert search["current"]["first_seen"] == "2026-03-01T15:00:00Z"
    assert search["created_at"] == "2026-03-01T12:00:00Z"


def test_snapshots_newest_first_and_full_listing(client: TestClient, world: World) -> None:
    body = client.get("/api/v1/servers/search/snapshots").json()
    assert [s["version"] for s in body["items"]] == [4, 3, 2, 1]
    v1 = body["items"][-1]
    assert v1["fingerprint"] == world.fingerprints[0]
    assert v1["poll_count"] == 2 and v1["tool_count"] == 3
    assert v1["first_seen"] == "2026-03-01T12:00:00Z" and v1["last_seen"] == "2026-03-01T12:30:00Z"

    page = client.get("/api/v1/servers/search/snapshots", params={"limit": 3}).json()
    assert [s["version"] for s in page["items"]] == [4, 3, 2] and page["next_before"] == 2
    rest = client.get("/api/v1/servers/search/snapshots", params={"limit": 3, "before": 2}).json()
    assert [s["version"] for s in rest["items"]] == [1] and rest["next_before"] is None

    full = client.get("/api/v1/servers/search/snapshots/3").json()
    assert full["version"] == 3 and full["server"] == "search"
    assert sorted(t["name"] for t in full["tools"]) == sorted(t["name"] for t in versions()[2])
    assert fingerprint(full["tools"]) == full["fingerprint"]
    missing = client.get("/api/v1/servers/search/snapshots/9")
    assert missing.status_code == 404 and "no version 9" in missing.json()["detail"]


def test_at_answers_the_version_in_force(client: TestClient, world: World) -> None:
    def at(when: str) -> Any:
        return client.get("/api/v1/servers/search/at", params={"time": when})

    early = at("2026-03-01T11:59:59Z")
    assert early.status_code == 404
    assert "no listing at 2026-03-01T11:59:59+00:00" in early.json()["detail"]
    assert "first version was seen at 2026-03-01T12:00:00+00:00" in early.json()["detail"]

    exact = at("2026-03-01T12:00:00Z").json()
    assert exact["snapshot"]["version"] == 1 and exact["certain"] is True
    assert exact["in_force_since"] == "2026-03-01T12:00:00Z"
    assert exact["superseded_at"] == "2026-03-01T13:00:00Z"

    gap = at("2026-03-01T12:45:00Z").json()  # after v1's last poll, before v2 was first seen
    assert gap["snapshot"]["version"] == 1 and gap["certain"] is False
    assert gap["last_confirmed"] == "2026-03-01T12:30:00Z"

    offset = at("2026-03-01T15:10:00+02:00").json()  # 13:10 UTC
    assert offset["snapshot"]["version"] == 2 and offset["time"] == "2026-03-01T13:10:00Z"

    latest = at("2030-01-01T00:00:00Z").json()
    assert latest["snapshot"]["version"] == 4 and latest["superseded_at"] is None

    naive = at("2026-03-01T13:10:00").json()  # no offset: read as UTC, as the dashboard reads it
    assert naive["snapshot"]["version"] == 2 and naive["time"] == "2026-03-01T13:10:00Z"
    assert at("yesterday").status_code == 422
    assert client.get("/api/v1/servers/search/at").status_code == 422
    unknown = client.get("/api/v1/servers/nope/at", params={"time": "2026-03-01T12:00:00Z"})
    assert unknown.status_code == 404 and unknown.json()["detail"] == "no server named 'nope'"


def test_tool_history_lists_each_definition_with_its_findings(client: TestClient) -> None:
    body = client.get("/api/v1/servers/search/tools/export/history").json()
    items = body["items"]
    assert [(i["from_version"], i["to_version"], i["present"]) for i in items] == [
        (4, 4, False),
        (2, 3, True),
        (1, 1, True),
    ]
    assert [f["rule"] for f in items[0]["findings"]] == ["tool-removed"]
    assert {f["rule"] for f in items[1]["findings"]} >= {"required-argument-added"}
    assert items[2]["findings"] == [] and items[2]["definition"]["name"] == "export"

    paged = client.get("/api/v1/servers/search/tools/export/history", params={"limit": 2}).json()
    assert len(paged["items"]) == 2 and paged["next_before"] == 2
    older = client.get("/api/v1/servers/search/tools/export/history", params={"limit": 2, "before": 2}).json()
    assert [i["from_version"] for i in older["items"]] == [1]

    hostile = client.get("/api/v1/servers/search/tools/%3Cscript%3Ealert(1)%3C%2Fscript%3E/history")
    assert hostile.status_code == 200 and hostile.json()["tool"] == HOSTILE_SCRIPT
    missing = client.get("/api/v1/servers/search/tools/nothing/history")
    assert missing.status_code == 404 and "never listed a tool named 'nothing'" in missing.json()["detail"]


def test_changes_filters_and_cursor(client: TestClient) -> None:
    everything = client.get("/api/v1/changes", params={"limit": 500}).json()["items"]
    rules = {c["rule"] for c in everything}
    assert {"read-only-revoked", "description-changed", "tool-added", "tool-removed"} <= rules
    assert "server-unreachable" in rules
    detected = [c["detected_at"] for c in everything]
    assert detected == sorted(detected, reverse=True)
    revoked = next(c for c in everything if c["rule"] == "read-only-revoked")
    assert (revoked["from_version"], revoked["to_version"], revoked["severity"]) == (1, 2, "critical")

    high = client.get("/api/v1/changes", params={"min_severity": "high"}).json()["items"]
    assert high and all(c["severity"] in ("high", "critical") for c in high)
    files = client.get("/api/v1/changes", params={"server": "files"}).json()["items"]
    assert [c["rule"] for c in files] == ["server-unreachable"]
    window = client.get(
        "/api/v1/changes", params={"since": "2026-03-01T13:00:00Z", "until": "2026-03-01T14:00:00Z"}
    ).json()["items"]
    assert window and {c["to_version"] for c in window if c["server"] == "search"} == {2}

    seen: list[int] = []
    cursor: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            params["before"] = cursor
        page = client.get("/api/v1/changes", params=params).json()
        seen += [c["id"] for c in page["items"]]
        cursor = page["next_before"]
        if cursor is None:
            break
    assert seen == [c["id"] for c in everything]

    assert client.get("/api/v1/changes", params={"min_severity": "huge"}).status_code == 422
    assert client.get("/api/v1/changes", params={"server": "nope"}).status_code == 404


def test_alerts_by_state_and_acknowledge(client: TestClient, world: World) -> None:
    open_alerts = client.get("/api/v1/alerts", params={"state": "open"}).json()["items"]
    assert {a["rule"] for a in open_alerts} == {"read-only-revoked", "hidden-text-in-description"}
    revoked = next(a for a in open_alerts if a["rule"] == "read-only-revoked")
    assert revoked["finding_count"] == 1 and revoked["server"] == "search"
    resolved = client.get("/api/v1/alerts", params={"state": "resolved"}).json()["items"]
    assert [a["rule"] for a in resolved] == ["server-unreachable"]
    assert len(client.get("/api/v1/alerts").json()["items"]) == 4
    assert client.get("/api/v1/alerts", params={"state": "closed"}).status_code == 422

    acked = client.post(f"/api/v1/alerts/{revoked['id']}/ack")
    assert acked.status_code == 200
    assert acked.json()["state"] == "acknowledged"
    assert acked.json()["acknowledged_at"] == "2026-03-01T17:00:00Z"
    assert client.post("/api/v1/alerts/999999/ack").status_code == 404


def test_auth_with_a_token(world: World) -> None:
    with web_client(world.store, auth=None) as anonymous:
        for path in ("/api/v1/servers", "/api/v1/changes", "/metrics", "/api/v1/openapi.json"):
            response = anonymous.get(path)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"] == "Bearer"
            assert "bearer token" in response.json()["detail"]
        assert anonymous.get("/healthz").json() == {"status": "ok"}
        assert anonymous.get("/api/v1/healthz").status_code == 200
        wrong = anonymous.get("/api/v1/servers", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        basic = anonymous.get("/api/v1/servers", headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
        assert anonymous.post("/api/v1/alerts/1/ack").status_code == 401
        assert anonymous.get("/api/v1/servers", headers=AUTH).status_code == 200
        assert anonymous.get("/api/v1/openapi.json", headers=AUTH).status_code == 200


def test_without_a_token_reads_are_open_and_changes_refused(world: World) -> None:
    with web_client(world.store, token=None, auth=None) as client:
        assert client.get("/api/v1/servers").status_code == 200
        assert client.get("/metrics").status_code == 200
        for method, path, body in (
            ("POST", "/api/v1/servers", {"name": "x", "url": "https://x.example/mcp"}),
            ("DELETE", "/api/v1/servers/search", None),
            ("POST", "/api/v1/servers/search/poll", None),
            ("POST", f"/api/v1/alerts/{world.alert_ids['open:read-only-revoked']}/ack", None),
            (
                "POST",
                "/api/v1/sessions",
                {"server": "search", "session_id": "s", "connected_at": "2026-03-01T12:00:00Z"},
            ),
            ("PUT", "/api/v1/sessions/search/s", {}),
            ("DELETE", "/api/v1/sessions/search/s", None),
        ):
            response = client.request(method, path, json=body)
            assert response.status_code == 403, (method, path)
            assert response.json()["detail"].startswith("no API token is configured"), (method, path)
            assert TOKEN_ENV in response.json()["detail"]
            guessed = client.request(method, path, json=body, headers=AUTH)
            assert guessed.status_code == 401, "a secret that is no token is refused, configured or not"
        decision = client.post("/api/v1/decisions", json={"server": "search", "tool": "lookup"})
        assert decision.status_code == 200, "decisions stay open, as before roles"


def test_register_and_delete_servers(client: TestClient, world: World) -> None:
    stdio = client.post(
        "/api/v1/servers", json={"name": "git", "transport": "stdio", "url": "https://x.example/"}
    )
    assert stdio.status_code == 422
    assert stdio.json()["detail"] == "body.transport: stdio servers are registered only from config files"

    created = client.post(
        "/api/v1/servers",
        json={
            "name": "remote",
            "transport": "sse",
            "url": "https://user:hunter2@remote.example/sse",
            "headers": {"Authorization": SECRET_HEADER},
            "interval_seconds": 300,
        },
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["origin"] == "api" and body["has_headers"] is True and body["transport"] == "sse"
    assert body["url"] == "https://user:***@remote.example/sse"
    assert created.headers["location"] == "/api/v1/servers/remote"
    with world.store.sessions() as session:
        stored = session.scalar(select(Server).where(Server.name == "remote"))
        assert stored is not None and stored.headers == {"Authorization": SECRET_HEADER}
        assert stored.interval_seconds == 300 and stored.next_poll_at is not None

    for path in ("/api/v1/servers", "/api/v1/servers/remote", "/api/v1/openapi.json", "/metrics", "/"):
        text = client.get(path).text
        assert "s3cr3t" not in text and "hunter2" not in text, path

    duplicate = client.post("/api/v1/servers", json={"name": "remote", "url": "https://remote.example/mcp"})
    assert duplicate.status_code == 409 and "already registered" in duplicate.json()["detail"]
    for bad, where in (
        ({"name": "x", "url": "ftp://remote.example/"}, "body.url"),
        ({"name": "x", "url": "https://"}, "body.url"),
        ({"name": "bad name", "url": "https://remote.example/"}, "body.name"),
        (
            {"name": "x", "url": "https://remote.example/", "headers": {"Bad Name": "v"}},
            "body.headers.Bad Name",
        ),
        (
            {"name": "x", "url": "https://remote.example/", "headers": {"X-A": "line\nbreak"}},
            "body.headers.X-A",
        ),
        ({"name": "x", "url": "https://remote.example:99999/"}, "body.url"),
        ({"name": "x", "url": "https://remote.example/a b"}, "body.url"),
        ({"name": "x", "url": "https://remote.example/", "command": "rm"}, "body.command"),
    ):
        response = client.post("/api/v1/servers", json=bad)
        assert response.status_code == 422, bad
        assert where in response.json()["detail"], (bad, response.json())

    assert client.delete("/api/v1/servers/remote").status_code == 204
    assert client.get("/api/v1/servers/remote").status_code == 404
    config_server = client.delete("/api/v1/servers/search")
    assert config_server.status_code == 409 and "config file" in config_server.json()["detail"]
    assert client.delete("/api/v1/servers/remote").status_code == 404


def test_deleting_a_server_removes_its_history(client: TestClient, world: World) -> None:
    """An API server with versions, findings and alerts goes with all of them (cascades)."""
    assert (
        client.post("/api/v1/servers", json={"name": "temp", "url": "https://t.example/mcp"}).status_code
        == 201
    )
    server_id = world.store.server_id("temp")
    assert server_id is not None
    record(world.store, server_id, versions()[0], T0)
    record(world.store, server_id, versions()[1], T0 + timedelta(hours=1))
    assert client.get("/api/v1/changes", params={"server": "temp"}).json()["items"]
    assert client.delete("/api/v1/servers/temp").status_code == 204
    with world.store.sessions() as session:
        left = session.scalars(select(FindingRecord).where(FindingRecord.server_id == server_id)).all()
    assert left == []


def test_validation_errors_say_what_and_never_echo_secrets(client: TestClient) -> None:
    response = client.post(
        "/api/v1/servers", json={"name": "x", "url": 5, "headers": {"Authorization": SECRET_HEADER}}
    )
    assert response.status_code == 422
    body = response.json()
    assert body["detail"].startswith("body.url:")
    assert body["errors"][0]["loc"] == ["body", "url"]
    assert "s3cr3t" not in response.text
    bad_header = client.post(
        "/api/v1/servers",
        json={"name": "x", "url": "https://a.example/", "headers": {"A": SECRET_HEADER + "\n"}},
    )
    assert bad_header.status_code == 422 and "s3cr3t" not in bad_header.text
    assert (
        client.get("/api/v1/servers/search/snapshots", params={"limit": 0})
        .json()["detail"]
        .startswith("query.limit:")
    )


def test_poll_now(world: World) -> None:
    with web_client(world.store) as client:
        unavailable = client.post("/api/v1/servers/search/poll")
        assert unavailable.status_code == 503 and "drift-monitor serve" in unavailable.json()["detail"]

    calls: list[str] = []

    async def poll_now(name: str) -> PollOutcome:
        calls.append(name)
        return record(world.store, world.search_id, versions()[0], T0 + timedelta(hours=6))

    with web_client(world.store, poll_now=poll_now) as client:
        polled = client.post("/api/v1/servers/search/poll")
        assert polled.status_code == 200, polled.text
        body = polled.json()
        assert body["ok"] is True and body["version"] == 5 and body["new_version"] is True
        assert body["worst"] == "high" and {f["rule"] for f in body["findings"]} >= {
            "read-only-claimed",
            "tool-added",
        }
        assert client.post("/api/v1/servers/nope/poll").status_code == 404
    assert calls == ["search"]


def test_host_sessions(client: TestClient, world: World) -> None:
    current = world.fingerprints[3]
    old = world.fingerprints[0]
    created = client.post(
        "/api/v1/sessions",
        json={
            "server": "search",
            "session_id": "host-1/a",
            "client": "desk",
            "connected_at": "2026-03-01T12:00:00Z",
            "fingerprint": old,
        },
    )
    assert created.status_code == 201, created.text
    assert created.json()["current_fingerprint"] == current
    assert created.json()["stale"] is False  # behind, but still within the grace period
    fresh = client.post(
        "/api/v1/sessions",
        json={
            "server": "search",
            "session_id": "host-2",
            "connected_at": "2026-03-01T16:00:00Z",
            "tools": versions()[3],
        },
    )
    assert fresh.status_code == 201 and fresh.json()["fingerprint"] == current and not fresh.json()["stale"]

    web = client.app.state.web  # type: ignore[attr-defined]
    web.clock = lambda: T0 + timedelta(hours=5, minutes=10)  # past the 5 min grace

    listed = client.get("/api/v1/sessions").json()["items"]
    assert [s["session_id"] for s in listed] == ["host-1/a", "host-2"]  # stale first
    assert [
        s["session_id"] for s in client.get("/api/v1/sessions", params={"stale": "true"}).json()["items"]
    ] == ["host-1/a"]
    page = client.get("/api/v1/sessions", params={"limit": 1}).json()
    assert page["next_before"] == "search/host-1/a"
    assert [
        s["session_id"]
        for s in client.get("/api/v1/sessions", params={"limit": 1, "before": "search/host-1/a"}).json()[
            "items"
        ]
    ] == ["host-2"]

    beat = client.put("/api/v1/sessions/search/host-1/a", json={"fingerprint": current})
    assert beat.status_code == 200 and beat.json()["stale"] is False
    assert client.put("/api/v1/sessions/search/host-1/a").status_code == 200  # a bare heartbeat
    assert client.put("/api/v1/sessions/search/unknown", json={}).status_code == 404
    assert client.put("/api/v1/sessions/nope/x", json={}).status_code == 404

    both = client.post(
        "/api/v1/sessions",
        json={
            "server": "search",
            "session_id": "x",
            "connected_at": "2026-03-01T12:00:00Z",
            "fingerprint": current,
            "tools": [],
        },
    )
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    neither = client.post(
        "/api/v1/sessions",
        json={"server": "search", "session_id": "x", "connected_at": "2026-03-01T12:00:00Z"},
    )
    assert neither.status_code == 422 and "fingerprint or the tools" in neither.json()["detail"]
    bad_fp = client.post(
        "/api/v1/sessions",
        json={
            "server": "search",
            "session_id": "x",
            "connected_at": "2026-03-01T12:00:00Z",
            "fingerprint": "abc",
        },
    )
    assert bad_fp.status_code == 422 and "body.fingerprint" in bad_fp.json()["detail"]
    unknown = client.post(
        "/api/v1/sessions",
        json={
            "server": "nope",
            "session_id": "x",
            "connected_at": "2026-03-01T12:00:00Z",
            "fingerprint": current,
        },
    )
    assert unknown.status_code == 404

    assert client.delete("/api/v1/sessions/search/host-1/a").status_code == 204
    assert client.delete("/api/v1/sessions/search/host-1/a").status_code == 404
    assert [s["session_id"] for s in client.get("/api/v1/sessions").json()["items"]] == ["host-2"]


def test_healthz_reports_an_unreachable_database(tmp_path: Any) -> None:
    from monitor.store import make_engine

    broken = Store(make_engine(f"sqlite:///{tmp_path}"))  # a directory: SQLite cannot open it
    try:
        with web_client(broken, auth=None) as client:
            response = client.get("/healthz")
            assert response.status_code == 503
            assert response.json() == {"status": "unavailable", "detail": "the database did not answer"}
    finally:
        broken.engine.dispose()


def test_metrics_gauges_read_from_the_database(client: TestClient) -> None:
    """State is read at scrape time; events are this process's counters (tests/test_metrics.py)."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    assert samples[("drift_monitor_open_alerts", (("severity", "critical"),))] == 1
    assert samples[("drift_monitor_open_alerts", (("severity", "high"),))] == 1
    assert samples[("drift_monitor_alerts", (("severity", "medium"), ("state", "acknowledged")))] == 1
    assert samples[("drift_monitor_webhook_deliveries_pending", ())] == 1
    assert samples[("drift_monitor_servers", (("status", "failing"),))] == 1
    assert samples[("drift_monitor_snapshot_versions", ())] == 5
    assert samples[("drift_monitor_server_up", (("server", "search"),))] == 1
    assert samples[("drift_monitor_server_up", (("server", "files"),))] == 0
    assert samples[("drift_monitor_server_version", (("server", "search"),))] == 4
    assert (
        samples[("drift_monitor_server_open_alerts", (("server", "search"), ("severity", "critical")))] == 1
    )
    assert samples[("drift_monitor_server_open_alerts", (("server", "search"), ("severity", "medium")))] == 1
    assert samples[("drift_monitor_server_open_alerts", (("server", "files"), ("severity", "high")))] == 0
    assert families["drift_monitor_poll_duration_seconds"].type == "histogram"
    assert families["drift_monitor_polls"].type == "counter"
    assert families["drift_monitor_build_info"].type == "gauge"

    openmetrics = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert "gaugehistogram" not in openmetrics.text
    assert "# TYPE drift_monitor_poll_duration_seconds histogram" in openmetrics.text
    assert openmetrics.text.endswith("# EOF\n") and openmetrics.text.count("# EOF") == 1


def test_openapi_describes_every_endpoint(client: TestClient) -> None:
    schema = client.get("/api/v1/openapi.json").json()
    paths = schema["paths"]
    expected = {
        "/api/v1/servers": {"get", "post"},
        "/api/v1/servers/{name}": {"get", "delete"},
        "/api/v1/servers/{name}/poll": {"post"},
        "/api/v1/servers/{name}/snapshots": {"get"},
        "/api/v1/servers/{name}/snapshots/{version}": {"get"},
        "/api/v1/servers/{name}/at": {"get"},
        "/api/v1/servers/{name}/tools/{tool}/history": {"get"},
        "/api/v1/changes": {"get"},
        "/api/v1/alerts": {"get"},
        "/api/v1/alerts/{alert_id}/ack": {"post"},
        "/api/v1/sessions": {"get", "post"},
        "/api/v1/sessions/{server}/{session_id}": {"put", "delete"},
        "/healthz": {"get"},
        "/metrics": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, path
        assert methods <= set(paths[path]), path
    assert not any(p.startswith("/servers") or p == "/" for p in paths)  # pages are not API
    assert "bearer" in json.dumps(schema["components"]["securitySchemes"]).lower()
    server_answer = paths["/api/v1/servers/{name}"]["get"]["responses"]["200"]["content"]["application/json"]
    server_out = schema["components"]["schemas"][server_answer["schema"]["$ref"].rsplit("/", 1)[-1]][
        "properties"
    ]
    assert "headers" not in server_out and "has_headers" in server_out
    listed = paths["/api/v1/servers/{name}/snapshots"]["get"]
    assert {p["name"] for p in listed["parameters"]} >= {"name", "limit", "before"}


def test_lone_surrogates_are_returned_as_json_escapes(store: Store) -> None:
    """Fingerprint v2 refuses lone surrogates (not I-JSON), but SQLite databases of the first release
    hold such listings under their old fingerprint; they still render."""
    if store.engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL's jsonb refuses lone surrogates, so such a listing is never stored there")
    (server_id,) = sync_servers(
        store, [ServerConfig(name="odd", transport="http", url="https://o.example/")], T0
    ).values()
    odd = tool("odd", description="broken \ud800 text", input_schema=QUERY)
    form = json.dumps(odd, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    record_poll(store, server_id, CanonicalListing({"odd": odd}, {"odd": form}, "0" * 64), T0)
    with web_client(store) as client:
        response = client.get("/api/v1/servers/odd/snapshots/1")
        assert response.status_code == 200
        assert "\\ud800" in response.text
        page = client.get("/servers/odd", headers=AUTH)
        assert page.status_code == 200 and "U+D800" in page.text


# --- schema-based fuzzing -----------------------------------------------------------------------


def _schema_cannot_state(response: Any) -> bool:
    if "duplicate tool name" in response.text:
        return True
    errors = response.json().get("errors") if response.status_code == 422 else None
    return bool(errors) and all(error["type"] == "contradictory" for error in errors)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "examples"), [("positive", 30), ("negative", 15)])
def test_fuzz_the_openapi(store: Store, database_url: str, mode: str, examples: int) -> None:
    """Whatever the schema allows (and, negatively, much it does not): no 5xx, and answers match the schema.

    Every operation gets a bounded number of generated requests against a populated database with
    a token configured. (Schemathesis' own pytest loader does not run on pytest 9, so the
    operations' Hypothesis strategies are driven directly.) Positive cases reach the database, so
    they run on PostgreSQL when there is one (the stricter: it refuses NUL and lone surrogates);
    negative cases exercise request validation, which no database changes, so they run on SQLite.
    """
    on_postgresql = database_url.startswith("postgresql")
    if mode == "negative" and on_postgresql:
        pytest.skip("negative cases run once, on SQLite")
    if mode == "positive" and not on_postgresql and os.environ.get("DRIFT_MONITOR_TEST_PG_URL"):
        pytest.skip("positive cases run on PostgreSQL when it is there")
    schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import ignored_auth

    populate(store)

    async def poll_now(name: str) -> PollOutcome:
        server_id = store.server_id(name)
        if server_id is None:
            raise KeyError(name)
        return store.record_failure(server_id, "connect", "refused", started_at=T0, finished_at=T0)

    app = make_app(store, poll_now=poll_now)
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app, headers=AUTH)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 18
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))
        @settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            response = case.call(headers=AUTH)
            assert response.status_code < 500, (case.method, case.formatted_path, response.text)
            # Unique tool names, and parameters that contradict each other (since after until,
            # severity with min_severity), are rules JSON Schema cannot state; everything else it can.
            if mode == "positive" and not _schema_cannot_state(response):
                # A host hook answers every caller 200 (a deny when it may not ask): a 401 would let
                # the host run the call (tests/test_gate.py); every other operation enforces auth.
                hook = case.formatted_path in HOOK_PATHS
                case.validate_response(response, excluded_checks=[ignored_auth] if hook else None)

        try:
            run()
        except Unsatisfiable:
            assert mode == "negative"  # nothing to negate (no parameters, no body)
