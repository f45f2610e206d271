"""The dashboard in the middle of an incident, in real headless Chromium: open criticals in one click
from the overview and the diff behind one in one more, sessions that fell behind, a tool's claim at
a given minute from the search box, auto-refresh the reader turns off, and every page at 390 px
(every width, and words kept whole in tables: tests/test_browser_tables.py).

The incident (`support.incident`) is five servers, four host sessions and a dozen alerts raised
through the one alert path. Skips when Playwright for Python or Chromium is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.browser import CHROMIUM, PHONE, browser_page, live_app, overflows, shoot, sign_in
from support.incident import Incident, incident_policy, seed_incident
from support.web import TOKEN, make_app

from monitor.store import Store, make_engine, migrate

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def incident_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Incident]]:
    """One seeded incident served for the whole module (the tests only read it, or acknowledge
    nothing): seeding and starting uvicorn once keeps the suite quick on a busy machine."""
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('incident') / 'incident.db'}")
    migrate(engine)
    policy = incident_policy()
    incident = seed_incident(Store(engine, hooks=[policy]), policy)
    try:
        with live_app(make_app(incident.store)) as base:
            yield base, incident
    finally:
        engine.dispose()


@pytest.fixture
def page(incident_site: tuple[str, Incident]) -> Iterator[Any]:
    with browser_page(incident_site[0]) as page:
        sign_in(page, TOKEN)
        yield page
        assert page.problems == [], page.problems  # no script errors, no CSP violations


@pytest.fixture
def phone(incident_site: tuple[str, Incident]) -> Iterator[Any]:
    with browser_page(incident_site[0], PHONE) as page:
        sign_in(page, TOKEN)
        yield page
        assert page.problems == [], page.problems


def rows(page: Any, table: str = "table.alerts") -> Any:
    return page.locator(f"{table} tbody tr")


def test_open_criticals_in_one_click_and_the_diff_behind_one_in_another(
    page: Any, incident_site: tuple[str, Incident]
) -> None:
    base, incident = incident_site
    page.goto("/?min_severity=critical")
    tiles = page.get_by_role("region", name="The whole fleet")
    # The filter narrows the table, never the tiles: they describe the whole fleet.
    assert re.search(r"Servers\s*5", tiles.inner_text()) and re.search(r"Failing\s*.?1", tiles.inner_text())
    assert page.locator("#servers-h + .table-box tbody tr").count() == 2  # search and github
    assert overflows(page) == 0
    shoot(page, "incident-overview-1440", publish=True)

    page.get_by_role("link", name="4 critical").click()  # one click from the overview
    page.wait_for_url(f"{base}/alerts?state=open&severity=critical")
    assert rows(page).count() == 4
    severities = rows(page).locator("td[data-label=Severity]").all_inner_texts()
    assert [s.strip().lower() for s in severities] == ["critical"] * 4
    revoked = incident.alert_ids["read-only-revoked/lookup"]
    row = rows(page).filter(has=page.get_by_role("link", name=f"Alert {revoked}", exact=True))
    alert_link = row.get_by_role("link", name=f"Alert {revoked}", exact=True)
    assert alert_link.get_attribute("href") == f"/alerts/{revoked}"

    row.get_by_role("link", name=re.compile(r"^Diff v1 → v2 that caused")).click()  # and one more
    page.get_by_role("heading", name="search: v1 → v2").wait_for()
    assert page.locator(".sev-critical").first.inner_text().lower() == "critical"
    assert "read-only-revoked" in page.locator("main").inner_text()


def test_alerts_worst_first_filters_and_acknowledged_stay_visible(
    page: Any, incident_site: tuple[str, Incident]
) -> None:
    _, incident = incident_site
    page.goto("/alerts")
    ranks = {"critical": 4, "high": 3, "medium": 2, "low": 1, "info": 0}
    listed = [
        (ranks[sev.strip().lower()], int(ident.strip().lstrip("#")))
        for sev, ident in zip(
            rows(page).locator("td[data-label=Severity]").all_inner_texts(),
            rows(page).locator("th a").all_inner_texts(),
            strict=True,
        )
    ]
    assert listed == sorted(listed, key=lambda r: (-r[0], -r[1]))  # worst first, then newest
    assert listed[0][0] == 4 and len(listed) == 16  # every unresolved alert, acknowledged included
    assert overflows(page) == 0, "the alerts table is wider than a 1440 px screen"
    acked = rows(page).filter(has=page.get_by_role("link", name=f"Alert {incident.acknowledged}", exact=True))
    assert "acknowledged" in acked.locator("td[data-label=State]").inner_text()
    stale = incident.alert_ids["session-stale/claude-code-7f2"]
    missed = page.get_by_role("link", name=f"Diff v1 → v4 the session missed (alert {stale})")
    assert missed.get_attribute("href") == "/servers/search/diff?from=1&to=4"
    shoot(page, "incident-alerts-1440", publish=True)

    page.get_by_label("Server", exact=True).select_option("github")
    page.get_by_label("Rule", exact=True).select_option("tool-added")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"server=github"))
    assert rows(page).count() == 1
    assert "merge_pr" in rows(page).first.inner_text()
    page.get_by_label("State", exact=True).select_option("resolved")
    page.get_by_label("Server", exact=True).select_option("")
    page.get_by_label("Rule", exact=True).select_option("")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"state=resolved"))
    assert rows(page).count() == 2 and "export" in rows(page).first.inner_text()

    page.goto("/servers/search")  # the server page keeps the acknowledged alert in view too
    unresolved = page.locator("#alerts-h + ul.findings")
    assert "acknowledged" in unresolved.inner_text()


def test_sessions_show_the_version_held_what_was_missed_and_links(
    page: Any, incident_site: tuple[str, Incident]
) -> None:
    _, incident = incident_site
    page.goto("/sessions")
    row = rows(page, "table.sessions").filter(has_text="claude-code-7f2")
    assert "v1, 3 versions behind v4" in row.locator("td[data-label=Holds]").inner_text()
    missed = row.locator("td[data-label='What it missed'] li").all_inner_texts()
    assert missed[0].lower().startswith("critical") and "read-only-revoked" in missed[0]
    alert = incident.alert_ids["session-stale/claude-code-7f2"]
    assert row.get_by_role("link", name=f"#{alert}").get_attribute("href") == f"/alerts/{alert}"
    current = rows(page, "table.sessions").filter(has_text="claude-code-9c1")
    assert "current" in current.locator("td[data-label=State]").inner_text()
    assert overflows(page) == 0
    shoot(page, "incident-sessions-1440", publish=True)

    row.get_by_role("link", name="diff v1 → v4").click()
    page.get_by_role("heading", name="search: v1 → v4").wait_for()


def test_search_finds_a_tool_and_what_it_claimed_at_a_minute(
    page: Any, incident_site: tuple[str, Incident]
) -> None:
    base, _ = incident_site
    page.goto("/")
    page.get_by_role("searchbox", name="Find a tool by name on every server").fill("ISSUE")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}/search?q=ISSUE")
    found = page.locator("main table tbody tr").all_inner_texts()
    assert len(found) == 2 and all("github" in r for r in found)  # create_issue, list_issues

    page.get_by_label("Tool name", exact=True).fill("lookup")
    page.get_by_label("At (UTC, optional)").fill("2026-03-01T13:10")
    page.get_by_role("button", name="Search").click()
    claim = page.locator("article.claim")
    claim.get_by_role("heading", name=re.compile(r"^lookup on search at 2026-03-01 13:10:00 UTC")).wait_for()
    text = claim.inner_text()
    assert "2026-03-01 13:00:00 UTC" in text  # in force since v2 came
    assert "v2–v4" in text and "read-only: no" in text
    assert "diff v1 → v2" in text and "still in force" in text
    assert overflows(page) == 0
    shoot(page, "incident-search-1440", publish=True)


def test_auto_refresh_is_on_until_the_reader_turns_it_off(page: Any) -> None:
    refresh = 'meta[http-equiv="refresh"]'
    page.goto("/alerts?state=open")
    assert page.locator(refresh).get_attribute("content") == "60"
    page.get_by_role("button", name="Turn auto-refresh off").click()
    page.get_by_role("button", name="Turn auto-refresh on").wait_for()
    assert page.url.endswith("/alerts?state=open") and page.locator(refresh).count() == 0
    page.goto("/sessions")
    assert page.locator(refresh).count() == 0  # the choice holds on every page
    page.get_by_role("button", name="Turn auto-refresh on").click()
    page.get_by_role("button", name="Turn auto-refresh off").wait_for()
    assert page.locator(refresh).count() == 1
    page.goto("/servers/search/diff")
    assert page.locator(refresh).count() == 0  # a diff being read is never reloaded


PHONE_PAGES = [
    ("/", "incident-overview-390"),
    ("/alerts", "incident-alerts-390"),
    ("/sessions", "incident-sessions-390"),
    ("/search?q=lookup&time=2026-03-01T13:10", "incident-search-390"),
    ("/servers/search", "server-390"),
    ("/servers/search/diff?from=1&to=2", "diff-390"),
    ("/servers/search/tools/lookup", "tool-390"),
    ("/at?server=search&time=2026-03-01T13:10", "at-390"),
]


def test_every_page_is_readable_at_390_px(phone: Any) -> None:
    """Nothing scrolls sideways on a phone: stacked tables become cards, others scroll in their box."""
    wide = []
    for path, name in PHONE_PAGES:
        phone.goto(path)
        phone.locator("main h1").wait_for()
        if overflows(phone):
            wide.append((path, overflows(phone)))
        shoot(phone, name, publish=name.startswith("incident-"))
    assert wide == [], f"wider than a 390 px phone (path, extra px): {wide}"
