"""The incident pages through the ASGI app, on SQLite and (when configured) PostgreSQL: alerts worst
first with filters and paging, fleet-wide tiles, sessions behind, tool search, auto-refresh."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from support.incident import Incident, incident_policy, seed_incident
from support.web import AUTH, page_text, web_client

from monitor.alerts import pages as alert_pages
from monitor.core.states import AlertState
from monitor.sessions import pages as session_pages
from monitor.store import Store
from monitor.store.models import Alert, Server


@pytest.fixture
def incident(engine: Engine) -> Incident:
    policy = incident_policy()
    return seed_incident(Store(engine, hooks=[policy]), policy)


@pytest.fixture
def client(incident: Incident) -> Iterator[TestClient]:
    with web_client(incident.store, auth="session", follow_redirects=False) as test_client:
        yield test_client


def listed_alerts(html: str) -> list[int]:
    return [int(found) for found in re.findall(r'<th scope="row"><a href="/alerts/(\d+)"', html)]


def unresolved_worst_first(incident: Incident) -> list[int]:
    with incident.store.sessions() as session:
        rows = session.execute(
            select(Alert.id, Alert.severity_rank).where(
                Alert.state.in_([s.value for s in AlertState.unresolved()])
            )
        ).all()
    return [alert_id for alert_id, _ in sorted(rows, key=lambda r: (-r[1], -r[0]))]


def test_alerts_are_unresolved_worst_first_then_newest(client: TestClient, incident: Incident) -> None:
    html = client.get("/alerts").text
    expected = unresolved_worst_first(incident)
    assert listed_alerts(html) == expected and len(expected) == 16  # 3 of them changed-without-version-bump
    assert incident.acknowledged in expected  # acknowledged, not resolved: still listed
    assert "(4 h ago)" in html and "2026-03-01 13:00:00 UTC" in page_text(html)  # relative next to absolute
    assert 'href="/servers/search/diff?from=1&amp;to=2"' in html  # the diff that caused an alert


def test_alert_filters(client: TestClient, incident: Incident) -> None:
    critical = listed_alerts(client.get("/alerts?severity=critical").text)
    assert len(critical) == 4 and incident.alert_ids["read-only-revoked/lookup"] in critical
    one = listed_alerts(client.get("/alerts?server=github&rule=tool-added").text)
    assert one == [incident.alert_ids["tool-added/merge_pr"]]
    assert len(listed_alerts(client.get("/alerts?state=resolved").text)) == 2
    assert listed_alerts(client.get("/alerts?state=acknowledged").text) == [incident.acknowledged]
    assert client.get("/alerts?severity=dire").status_code == 422
    assert client.get("/alerts?state=closed").status_code == 422
    assert client.get("/alerts?server=nope").status_code == 404
    assert client.get("/alerts?before=x-1").status_code == 422
    assert client.get("/alerts?rule=%00").status_code == 422


def test_alert_pages_follow_on_without_gaps(
    client: TestClient, incident: Incident, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(alert_pages, "ALERTS_PER_PAGE", 4)
    seen: list[int] = []
    path: str | None = "/alerts?state=unresolved"
    for _ in range(10):  # bounded: 13 alerts are four pages
        assert path is not None
        html = client.get(path).text
        seen += listed_alerts(html)
        more = re.search(r'<a href="(/alerts\?[^"]+)">More alerts', html)
        path = more.group(1).replace("&amp;", "&") if more else None
        if path is None:
            break
    assert seen == unresolved_worst_first(incident)


def test_overview_tiles_describe_the_whole_fleet(client: TestClient) -> None:
    def tiles(path: str) -> str:
        html = client.get(path).text
        return html[html.index('<dl class="stats">') : html.index("</dl>")]

    everything = tiles("/")
    assert tiles("/?min_severity=critical") == everything
    assert re.search(r"<dt>Servers</dt><dd>5</dd>", everything)
    stale = re.search(
        r'Stale sessions</a></dt><dd><span class="status status-failing">(\d+)</span>', everything
    )
    assert stale is not None and stale.group(1) == "3"  # as many as /sessions?stale=1 lists
    assert client.get("/sessions?stale=1").text.count('<tr class="row-failing">') == 3
    assert 'href="/alerts?state=open&amp;severity=critical"' in everything and "4 critical" in everything
    assert tiles("/?status=failing") == everything
    filtered = client.get("/?min_severity=critical").text
    assert "(2 of 5)" in filtered
    failing = client.get("/?status=failing").text
    assert "Failing servers (1 of 5)" in failing and 'href="/servers/files"' in failing
    assert 'href="/servers/search"' not in failing.split('id="changes-h"')[0]
    assert client.get("/?status=broken").status_code == 422


def test_sessions_show_version_behind_missed_and_links(client: TestClient, incident: Incident) -> None:
    html = client.get("/sessions").text
    assert "<strong>v1</strong>, 3 versions behind v4" in html
    assert "<strong>v3</strong>, 1 version behind v4" in html
    assert "<strong>v1</strong>, the current version" in html  # tickets
    assert 'href="/servers/search/diff?from=1&amp;to=4"' in html
    assert f'href="/alerts/{incident.alert_ids["session-stale/cursor-31"]}"' in html
    row = html[html.index("claude-code-7f2") :]
    missed = re.findall(r'<span class="sev sev-(\w+)">', row[: row.index("</ul>")])
    assert missed[0] == "critical" and missed == sorted(
        missed, key=["info", "low", "medium", "high", "critical"].index, reverse=True
    )


def test_sessions_page_in_pages(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_pages, "SESSIONS_PER_PAGE", 3)
    first = client.get("/sessions").text
    assert "Sessions 1–3 of 4" in first and 'href="/sessions?page=2"' in first
    second = client.get("/sessions?page=2").text
    assert "Sessions 4–4 of 4" in second and "claude-code-9c1" in second  # the current one comes last
    assert client.get("/sessions?page=0").status_code == 422


def test_search_finds_tools_by_any_part_of_the_name(client: TestClient) -> None:
    issues = client.get("/search?q=ISSUE").text
    assert issues.count('<th scope="row"><a href="/servers/github/tools/') == 2
    underscored = client.get("/search?q=_").text  # `_` is a character here, not a wildcard
    assert "/servers/search/tools/lookup" not in underscored and "/tools/list_issues" in underscored
    assert "No server ever listed" in client.get("/search?q=%25").text
    removed = client.get("/search?q=export").text
    assert "removed" in removed
    assert client.get("/search?q=" + "x" * 201).status_code == 422


def test_search_at_a_minute_answers_the_definition_in_force(client: TestClient) -> None:
    html = client.get("/search?q=lookup&time=2026-03-01T13:10").text
    assert 'lookup <span class="muted">on</span> search' in html
    assert "2026-03-01 13:00:00 UTC" in page_text(html) and "v2–v4" in html and "read-only: no" in html
    assert "diff v1 → v2" in html and "still in force" in html
    before = client.get("/search?q=export&time=2026-03-01T15:30:00Z").text
    assert "absent" in before and "diff v3 → v4" in before  # removed in v4
    early = client.get("/search?q=lookup&time=2026-03-01T11:00").text
    assert "had no recorded listing at that time" in early
    assert client.get("/search?q=lookup&time=yesterday").status_code == 422


def test_auto_refresh_can_be_turned_off_and_on(client: TestClient) -> None:
    meta = '<meta http-equiv="refresh" content="60">'
    page = client.get("/alerts")
    assert meta in page.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    refused = client.post("/refresh", data={"refresh": "off", "next": "/alerts"})
    assert refused.status_code == 403  # no CSRF token: never acted on
    off = client.post("/refresh", data={"refresh": "off", "next": "/alerts", "csrf_token": token.group(1)})
    assert off.status_code == 303 and off.headers["location"] == "/alerts"
    assert meta not in client.get("/alerts").text and meta not in client.get("/").text
    assert "Turn auto-refresh on" in client.get("/sessions").text
    away = client.post(
        "/refresh", data={"refresh": "on", "next": "//evil.example/", "csrf_token": token.group(1)}
    )
    assert away.headers["location"] == "/"  # only local paths
    assert meta in client.get("/sessions").text
    assert meta not in client.get("/servers/search/diff").text  # a diff being read never reloads


def rows_of(html: str, heading: str) -> list[str]:
    """The body rows of the table after the heading with id `heading`."""
    section = html[html.index(f'id="{heading}"') :]
    table = section[: section.index("</table>")]
    return re.findall(r"<tr>.*?</tr>", table[table.index("<tbody>") :], re.S)


def held_back(html: str) -> dict[str, str]:
    """The alert page's other tools hosts are told to deny or ask about: tool -> decision, in order."""
    found = {}
    for row in rows_of(html, "others-h"):
        tool = re.search(r'href="/servers/[^/"]+/tools/([^"]+)"', row)
        decision = re.search(r'class="decision decision-(\w+)"', row)
        assert tool and decision, row
        found[unquote(tool.group(1))] = decision.group(1)
    return found


def test_an_alert_shows_the_servers_other_tools_held_back(client: TestClient, incident: Incident) -> None:
    """The alert page lists the server's other tools hosts are told deny or ask now, strictest first,
    each linking to its tool page. Must hold: the same decisions the decision API gives (the page
    reuses the decision point, it does not judge again), the alert's own tool and the allowed tools
    left out; an alert about the server itself lists every tool held back."""
    revoked = incident.alert_ids["read-only-revoked/lookup"]
    shown = held_back(client.get(f"/alerts/{revoked}").text)
    assert list(shown.items()) == [("<script>alert(1)</script>", "deny"), ("purge", "ask")], "strictest first"
    for tool in ("<script>alert(1)</script>", "purge", "wipe_index", "lookup"):
        asked = client.post("/api/v1/decisions", json={"server": "search", "tool": tool}, headers=AUTH)
        assert asked.json()["decision"] == shown.get(tool, "deny" if tool == "lookup" else "allow"), tool
    with incident.store.sessions() as session:
        about_search = session.scalars(
            select(Alert.id)
            .join(Server, Server.id == Alert.server_id)
            .where(Server.name == "search", Alert.tool.is_(None), Alert.session_id.is_(None))
        ).first()
    assert about_search is not None
    everything = held_back(client.get(f"/alerts/{about_search}").text)
    assert list(everything) == ["<script>alert(1)</script>", "lookup", "purge"], "the server's: all of them"


def test_the_overviews_recent_changes_link_to_their_alerts(client: TestClient, incident: Incident) -> None:
    rows = rows_of(client.get("/").text, "changes-h")
    revoked = incident.alert_ids["read-only-revoked/lookup"]
    (row,) = [r for r in rows if "<code>read-only-revoked</code>" in r and "/search/tools/lookup" in r]
    assert f'<a href="/alerts/{revoked}"' in row and "/servers/search/diff?from=1&amp;to=2" in row
    assert all('href="/alerts/' in r or ">none<" in r for r in rows)
    assert sum('href="/alerts/' in r for r in rows) >= 10, "each change that raised one"
