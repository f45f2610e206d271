"""The dashboard in real headless Chromium: sign in, read the overview, open a diff, acknowledge an alert.

The app runs under uvicorn on 127.0.0.1 (a kernel-chosen port) in a thread of this process and is
stopped at the end (`support.browser`). Screenshots go to test-artifacts/ (git-ignored); with
DRIFT_MONITOR_UPDATE_SCREENSHOTS=1 the overview and a diff are also copied to docs/screenshots/.
Skips when Playwright for Python or Chromium (Debian's, or $DRIFT_MONITOR_CHROMIUM) is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.browser import CHROMIUM, browser_page, live_app, shoot, sign_in
from support.tools import tool
from support.web import TOKEN, make_app
from support.world import QUERY, T0, World, populate, record

from monitor.config import ServerConfig
from monitor.store import Store, make_engine, migrate
from monitor.store.registration import sync_servers

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"
)


def add_fleet(store: Store) -> None:
    """A few more servers, so the overview looks like a small fleet."""
    configs = [
        ServerConfig(name="github", transport="http", url="https://mcp.github.example/mcp"),
        ServerConfig(name="postgres-ro", transport="stdio", command="mcp-postgres"),
        ServerConfig(name="slack", transport="sse", url="https://slack.example/sse"),
        ServerConfig(name="tickets", transport="http", url="https://tickets.example/mcp"),
    ]
    ids = sync_servers(store, configs, T0)
    base = [
        tool(
            "list_issues",
            description="List issues of a repository.",
            input_schema=QUERY,
            annotations={"readOnlyHint": True},
        ),
        tool(
            "create_issue",
            description="Open an issue.",
            input_schema=QUERY,
            annotations={"readOnlyHint": False, "destructiveHint": False},
        ),
    ]
    merge = tool("merge_pr", description="Merge a pull request.", input_schema=QUERY)
    record(store, ids["github"], base, T0)
    record(store, ids["github"], [*base, merge], T0 + timedelta(hours=2))
    query = tool(
        "query",
        description="Run a read-only SQL query.",
        input_schema=QUERY,
        annotations={"readOnlyHint": True},
    )
    record(store, ids["postgres-ro"], [query], T0)
    post = tool(
        "post_message",
        description="Post to a channel.",
        input_schema=QUERY,
        annotations={"openWorldHint": True},
    )
    record(store, ids["slack"], [post], T0)
    at = T0 + timedelta(hours=4)
    store.record_failure(ids["tickets"], "timeout", "no answer within 30 s", started_at=at, finished_at=at)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[tuple[str, World]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'browser.db'}")
    migrate(engine)
    store = Store(engine)
    world = populate(store)
    add_fleet(store)
    try:
        with live_app(make_app(store)) as base:
            yield base, world
    finally:
        engine.dispose()


@pytest.fixture
def page(live_server: tuple[str, World]) -> Iterator[Any]:
    with browser_page(live_server[0]) as page:
        yield page


def test_sign_in_overview_diff_and_acknowledge(page: Any, live_server: tuple[str, World]) -> None:
    base, world = live_server
    page.goto("/alerts")
    assert page.url.startswith(f"{base}/login?next=")
    sign_in(page, TOKEN, "/alerts")  # on the page the redirect opened, which carries /alerts along

    page.goto("/")
    page.get_by_role("heading", name="Overview").wait_for()
    servers = page.get_by_role("table").first
    assert servers.get_by_role("row").count() == 1 + 6
    assert page.locator(".status-failing").first.is_visible()
    first_row = servers.get_by_role("row").nth(1)
    assert "search" in first_row.inner_text()  # the server with a critical alert sorts first
    shoot(page, "overview", publish=True)

    page.get_by_role("link", name="search", exact=True).first.click()
    page.get_by_role("heading", name="Current tools (v4, 4)").wait_for()
    marks = page.locator("mark.hidden-char")
    assert marks.count() >= 5 and marks.first.is_visible()
    shoot(page, "server")
    page.get_by_role("link", name="diff v1 → v2").click()
    page.get_by_role("heading", name="search: v1 → v2").wait_for()
    critical = page.locator(".sev-critical").first
    assert critical.inner_text().lower() == "critical"  # the label is text, not only colour
    assert page.locator("del").count() >= 1 and page.locator("ins").count() >= 1
    shoot(page, "diff", publish=True)

    page.goto("/servers/search/diff?from=2&to=3")
    page.locator("text=U+202E").first.wait_for()
    assert page.evaluate("() => document.querySelectorAll('script, img[onerror]').length") == 0
    assert page.evaluate("() => window.__xss === undefined")
    shoot(page, "diff-hidden-text")

    page.goto("/servers/search/tools/export")
    page.get_by_role("heading", name="Tool export on search").wait_for()
    assert page.locator(".history > li").count() == 3
    shoot(page, "tool-history")

    page.goto("/alerts")
    alert_id = world.alert_ids["open:read-only-revoked"]
    page.get_by_role("button", name=f"Acknowledge alert {alert_id}").click()
    page.get_by_role("status").wait_for()
    assert f"Alert {alert_id} acknowledged" in page.get_by_role("status").inner_text()
    page.goto("/alerts?state=acknowledged")
    assert page.get_by_role("link", name=f"Alert {alert_id}", exact=True).count() == 1
    shoot(page, "alerts")

    page.goto("/at?server=search&time=2026-03-01T13:10:00")
    page.get_by_role("heading", name="search at 2026-03-01 13:10:00 UTC: v2").wait_for()
    shoot(page, "point-in-time")
    assert page.problems == [], page.problems  # no script errors, no CSP violations


def test_approve_a_version_from_the_diff_page(page: Any, live_server: tuple[str, World]) -> None:
    """Signed in, a person approves v4 beside the findings of v1 -> v4: the read-only-revoked alert
    resolves, and the server page shows lookup allowed as in v4."""
    base, _ = live_server
    sign_in(page, TOKEN, "/servers/search/diff?from=1&to=4")
    assert "also resolve the 1 open alert these changes raised" in page.content()
    page.get_by_label("Note").fill("the access-time update is intended")
    page.get_by_role("button", name="Approve every tool as in v4").click()
    page.get_by_role("heading", name="Approve every tool as in v4?").wait_for()
    assert page.url.startswith(f"{base}/servers/search/approve?version=4&"), "an address of its own"
    page.reload()  # a reload (or the address, copied) asks again and changes nothing
    page.get_by_role("heading", name="Approve every tool as in v4?").wait_for()
    assert (
        "It resolves 1 open alert" in page.content()
        and "the access-time update is intended" in page.content()
    )
    shoot(page, "approve-confirm")
    page.get_by_role("button", name="Approve — as Administrator").click()
    page.wait_for_url(f"{base}/servers/search/diff?from=1&to=4")
    assert (
        "Administrator approved 4 tools of search as in v4, resolving alert(s)"
        in page.get_by_role("status").inner_text()
    )
    page.goto("/servers/search#approvals")
    approvals = page.locator("#approvals")
    row = (
        approvals.get_by_role("row")
        .filter(has=page.get_by_role("rowheader", name="lookup", exact=True))
        .first
    )
    assert "allow" in row.inner_text().lower() and "v4" in row.inner_text()
    shoot(page, "approvals")
    assert page.problems == []


def test_from_a_webhooks_link_to_acting_on_the_alert_click_by_click(
    page: Any, live_server: tuple[str, World]
) -> None:
    """A webhook's `url` is `/alerts/{id}`. From there, with no other page: acknowledge is one click,
    silence-and-resolve one click, approve one click and its confirmation (which lands back on the
    alert, saying what was approved and by whom), resolve one click; the page then says why each
    ended."""
    base, world = live_server
    revoked = world.alert_ids["open:read-only-revoked"]
    hidden = world.alert_ids["open:hidden-text-in-description"]
    sign_in(page, TOKEN, f"/alerts/{revoked}")  # the webhook's link, through the sign-in
    page.get_by_role("heading", name="Before and after: v1 → v2").wait_for()
    page.get_by_role("heading", name="What hosts are told now").wait_for()
    shoot(page, "alert", publish=True)

    page.get_by_role("button", name="Acknowledge — as Administrator").click()  # click 1: acknowledged
    page.get_by_role("status").wait_for()
    assert "acknowledged by Administrator" in page.locator("main").inner_text()

    page.get_by_role("button", name="Approve lookup as in v2…").click()  # click 1: what it will do
    page.get_by_role("button", name="Approve — as Administrator").click()  # click 2: approved, resolved
    page.wait_for_url(f"{base}/alerts/{revoked}")  # back where the approval was asked for
    said = page.get_by_role("status").inner_text()
    assert said == f"Administrator approved 'lookup' of search as in v2, resolving alert(s) #{revoked}."
    assert "approved by Administrator as in v2" in page.locator("main").inner_text()

    page.goto(f"/alerts/{hidden}")  # another webhook's link
    page.get_by_role("button", name="Silence for 4h").click()  # click 1: silenced and resolved
    page.get_by_role("status").wait_for()
    assert page.url == f"{base}/alerts/{hidden}"
    assert "silenced by Administrator until" in page.locator("main").inner_text()
    assert page.problems == [], page.problems
