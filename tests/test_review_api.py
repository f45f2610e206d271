"""What a reviewer asks the API during an incident (docs/contract.md section 13): the diff between any
two versions, alerts in the dashboard's order, a tool at an instant, and errors that say how to fix
the request. Over the history `support.world.populate` records."""

from __future__ import annotations

from fastapi.testclient import TestClient
from support.world import World


def test_diff_between_two_versions_gives_the_dashboards_rows(client: TestClient, world: World) -> None:
    adjacent = client.get("/api/v1/servers/search/diff", params={"from": 1, "to": 2})
    assert adjacent.status_code == 200, adjacent.text
    body = adjacent.json()
    assert (body["old"]["version"], body["new"]["version"], body["stored"]) == (1, 2, True)
    assert body["old"]["fingerprint"] == world.fingerprints[0]
    lookup = next(t for t in body["tools"] if t["name"] == "lookup")
    assert lookup["status"] == "changed" and lookup["worst"] == "critical"
    assert "read-only-revoked" in {f["rule"] for f in lookup["findings"]}
    assert {t["name"]: t["status"] for t in body["tools"]}["purge"] == "added"
    assert body["tools"][0]["name"] == "lookup", "worst first, as the diff page orders them"
    assert body["findings"][0]["severity"] == "critical"

    far = client.get("/api/v1/servers/search/diff", params={"from": 1, "to": 4}).json()
    assert far["stored"] is False
    statuses = {t["name"]: t["status"] for t in far["tools"]}
    assert statuses["export"] == "removed" and statuses["lookup"] == "changed"
    assert "tool-removed" in {f["rule"] for f in far["findings"]}

    newest = client.get("/api/v1/servers/search/diff", params={"from": 2}).json()
    assert (newest["old"]["version"], newest["new"]["version"]) == (2, 4)
    previous = client.get("/api/v1/servers/search/diff").json()
    assert (previous["old"]["version"], previous["new"]["version"]) == (3, 4)

    missing = client.get("/api/v1/servers/search/diff", params={"from": 1, "to": 9})
    assert missing.status_code == 404 and "no version 9" in missing.json()["detail"]
    assert client.get("/api/v1/servers/nope/diff").status_code == 404
    assert client.get("/api/v1/servers/search/diff", params={"from": 0}).status_code == 422


def test_alerts_worst_first_and_unresolved(client: TestClient, world: World) -> None:
    ids = world.alert_ids
    every = client.get("/api/v1/alerts").json()["items"]
    assert [a["id"] for a in every] == [
        ids["open:read-only-revoked"],
        ids["open:hidden-text-in-description"],
        ids["resolved:server-unreachable"],
        ids["acknowledged:tool-added"],
    ], "critical, then high newest first, then medium: the dashboard's order"

    unresolved = client.get("/api/v1/alerts", params={"state": "unresolved"})
    assert unresolved.status_code == 200, unresolved.text
    assert [a["state"] for a in unresolved.json()["items"]] == ["open", "open", "acknowledged"]

    seen: list[int] = []
    cursor: int | None = None
    for _ in range(10):
        params: dict[str, int] = {"limit": 1}
        if cursor is not None:
            params["before"] = cursor
        page = client.get("/api/v1/alerts", params=params).json()
        seen += [a["id"] for a in page["items"]]
        cursor = page["next_before"]
        if cursor is None:
            break
    assert seen == [a["id"] for a in every], "pages continue in the same worst-first order"

    refused = client.get("/api/v1/alerts", params={"state": "closed"})
    assert refused.status_code == 422 and "unresolved" in refused.json()["detail"]


def test_a_tool_unknown_at_an_instant_is_404(client: TestClient) -> None:
    unknown = client.get(
        "/api/v1/servers/search/at", params={"time": "2026-03-01T12:10:00Z", "tool": "nosuch"}
    )
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "server 'search' never listed a tool named 'nosuch'"

    not_yet = client.get(
        "/api/v1/servers/search/at", params={"time": "2026-03-01T12:10:00Z", "tool": "purge"}
    )
    assert not_yet.status_code == 404
    assert "version 1 in force at 2026-03-01T12:10:00+00:00 did not list 'purge'" in not_yet.json()["detail"]
    assert "versions 2-4" in not_yet.json()["detail"]

    listed = client.get("/api/v1/servers/search/at", params={"time": "2026-03-01T13:10:00Z", "tool": "purge"})
    assert listed.status_code == 200 and listed.json()["tool_version"]["from_version"] == 2


def test_an_unencoded_plus_in_a_time_says_to_encode_it(client: TestClient) -> None:
    # What `curl '...?time=2026-03-01T12:00:00+00:00'` sends: the `+` arrives as a space.
    raw = client.get("/api/v1/servers/search/at?time=2026-03-01T12:00:00+00:00")
    assert raw.status_code == 422
    detail = raw.json()["detail"]
    assert "%2B" in detail and "Z" in detail, detail
    encoded = client.get("/api/v1/servers/search/at?time=2026-03-01T12:00:00%2B00:00")
    assert encoded.status_code == 200
    changes = client.get("/api/v1/changes?since=2026-03-01T12:00:00+00:00")
    assert changes.status_code == 422 and "%2B" in changes.json()["detail"]
