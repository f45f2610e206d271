"""The API's filters during an incident: unknown or contradictory parameters are refused by name,
/changes filters by tool and rule, times without an offset are UTC, and `at` answers with the tools."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from support.world import HOSTILE_SCRIPT, World


@pytest.mark.parametrize(
    ("path", "query", "named"),
    [
        ("/api/v1/changes", "tools=lookup", ["tools"]),
        ("/api/v1/changes", "servr=search&limt=5", ["servr", "limt"]),
        ("/api/v1/alerts", "status=open", ["status"]),
        ("/api/v1/servers", "name=search", ["name"]),
        ("/api/v1/servers/search/snapshots", "version=2", ["version"]),
        ("/api/v1/sessions", "server=search", ["server"]),
        ("/api/v1/servers/search/at", "time=2026-03-01T13:10:00Z&at=x", ["at"]),
    ],
)
def test_unknown_query_parameters_are_named_in_a_422(
    client: TestClient, path: str, query: str, named: list[str]
) -> None:
    answer = client.get(f"{path}?{query}")
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert [e["loc"] for e in body["errors"]] == [["query", name] for name in named]
    for name in named:
        assert f"query.{name}: unknown query parameter" in body["detail"]
    assert "this endpoint takes:" in body["detail"]


def test_a_single_valued_parameter_given_twice_is_refused(client: TestClient) -> None:
    answer = client.get("/api/v1/alerts?state=open&state=resolved")
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["loc"] == ["query", "state"]
    assert "more than once" in answer.json()["detail"]


def test_contradictory_parameters_are_refused(client: TestClient) -> None:
    both = client.get("/api/v1/alerts?severity=critical&min_severity=high")
    assert both.status_code == 422
    assert [e["loc"] for e in both.json()["errors"]] == [["query", "severity"], ["query", "min_severity"]]
    backwards = client.get("/api/v1/changes?since=2026-03-01T14:00:00Z&until=2026-03-01T13:00:00Z")
    assert backwards.status_code == 422
    assert "since must be earlier than until" in backwards.json()["detail"]
    unknown_rule = client.get("/api/v1/changes?rule=read-only-revokd")
    assert unknown_rule.status_code == 422
    assert "query.rule: unknown rule" in unknown_rule.json()["detail"]


def test_changes_filter_by_tool_and_rule(client: TestClient) -> None:
    everything = client.get("/api/v1/changes?limit=500").json()["items"]
    lookup = client.get("/api/v1/changes", params={"tool": "lookup"}).json()["items"]
    assert lookup and all(c["tool"] == "lookup" for c in lookup)
    assert len(lookup) < len(everything)
    revoked = client.get("/api/v1/changes", params={"rule": "read-only-revoked"}).json()["items"]
    assert [(c["tool"], c["rule"]) for c in revoked] == [("lookup", "read-only-revoked")]
    both = client.get("/api/v1/changes", params={"tool": "export", "rule": "read-only-revoked"})
    assert both.json()["items"] == []
    hostile = client.get("/api/v1/changes", params={"tool": HOSTILE_SCRIPT}).json()["items"]
    assert hostile and {c["tool"] for c in hostile} == {HOSTILE_SCRIPT}


def test_times_without_an_offset_are_utc(client: TestClient) -> None:
    def tools_changed(**params: str) -> list[tuple[str, str]]:
        items = client.get("/api/v1/changes", params=params).json()["items"]
        return [(c["tool"], c["detected_at"]) for c in items]

    naive = tools_changed(since="2026-03-01T13:00:00", until="2026-03-01T14:00:00")
    zoned = tools_changed(since="2026-03-01T13:00:00Z", until="2026-03-01T14:00:00+00:00")
    assert naive == zoned and naive
    assert all(at.startswith("2026-03-01T13:") for _, at in naive)


def test_at_answers_with_the_tools_or_one_tool(client: TestClient) -> None:
    whole = client.get("/api/v1/servers/search/at", params={"time": "2026-03-01T13:10:00Z"}).json()
    assert whole["snapshot"]["version"] == 2
    assert sorted(t["name"] for t in whole["tools"]) == ["export", "lookup", "purge", "wipe_index"]
    assert whole["tool_version"] is None

    one = client.get(
        "/api/v1/servers/search/at", params={"time": "2026-03-01T15:10:00", "tool": "lookup"}
    ).json()
    assert one["snapshot"]["version"] == 4
    assert [t["name"] for t in one["tools"]] == ["lookup"]
    assert one["tools"][0]["annotations"] == {"readOnlyHint": False}
    since = one["tool_version"]
    assert (since["from_version"], since["to_version"]) == (2, 4)
    assert since["first_seen"] == "2026-03-01T13:00:00Z"  # the definition in force came with v2

    gone = client.get("/api/v1/servers/search/at", params={"time": "2026-03-01T15:10:00Z", "tool": "export"})
    assert gone.status_code == 404, "a tool the version in force did not list is not an empty answer"
    assert "version 4 in force" in gone.json()["detail"] and "in versions 1-3" in gone.json()["detail"]


def test_alerts_filter_by_severity_and_rule(client: TestClient, world: World) -> None:
    critical = client.get("/api/v1/alerts?severity=critical").json()["items"]
    assert [a["id"] for a in critical] == [world.alert_ids["open:read-only-revoked"]]
    medium = client.get("/api/v1/alerts", params={"rule": "tool-added"}).json()["items"]
    assert [a["state"] for a in medium] == ["acknowledged"]
