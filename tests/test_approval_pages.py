"""Approving and revoking on the dashboard, over the history `support.world.populate` records: the
server page shows each tool's decision, the diff page approves beside the findings, the tool page
keeps who approved what."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import create_engine, func, select
from support.web import TOKEN, add_token, hold_session, page_text, session_value, web_client
from support.world import World

from monitor.store import Store
from monitor.store.access import Approval
from monitor.store.models import Alert


@pytest.fixture
def browser(world: World) -> Iterator[TestClient]:
    with web_client(world.store, auth=None, follow_redirects=False) as test_client:
        yield test_client


def csrf_of(response: Response) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', response.text)
    assert match, response.text[:300]
    return match.group(1)


def sign_in(browser: TestClient) -> None:
    login = browser.get("/login")
    response = browser.post("/login", data={"csrf_token": csrf_of(login), "token": TOKEN, "next": "/"})
    assert response.status_code == 303


def decision_row(html: str, tool: str) -> str:
    match = re.search(
        rf'<a href="[^"]*/tools/{tool}"[^>]*>{tool}</a></th>\s*'
        r'<td[^>]*><span class="decision decision-(\w+)"',
        html,
    )
    assert match, f"no decision row for {tool}"
    return match.group(1)


def test_server_page_shows_decisions_and_the_diff_page_approves(browser: TestClient, world: World) -> None:
    sign_in(browser)
    page = browser.get("/servers/search")
    assert page.status_code == 200 and "Approvals and decisions" in page.text
    assert decision_row(page.text, "lookup") == "deny", "tofu trusted v1, where lookup was read-only"
    assert decision_row(page.text, "wipe_index") == "allow"
    assert "read-only-revoked" in page.text

    diff = browser.get("/servers/search/diff?from=1&to=4")
    assert "Approve every tool as in v4" in diff.text
    assert diff.text.count("Approve this tool as in v4") == 3, (
        "lookup, purge and the hostile tool; export is gone"
    )
    assert "also resolve the 1 open alert these changes raised" in diff.text
    assert "also resolve the 1 open alert the changes up to v4 raised" in page.text
    refused = browser.post("/servers/search/approve", data={"version": "4", "back": "diff", "from": "1"})
    assert refused.status_code == 403, "no CSRF token"
    done = browser.post(
        "/servers/search/approve",
        data={
            "csrf_token": csrf_of(diff),
            "version": "4",
            "from": "1",
            "back": "diff",
            "note": "the access-time update is intended",
            "resolve_alerts": "on",
            "confirm": "yes",  # the confirmation step itself: tests/test_alert_page.py
        },
    )
    assert done.status_code == 303, done.text
    assert done.headers["location"] == "/servers/search/diff?from=1&to=4"
    alert_id = world.alert_ids["open:read-only-revoked"]
    banner = re.search(r'<p class="flash"[^>]*>(.*?)</p>', browser.get(done.headers["location"]).text)
    assert banner is not None
    assert (
        banner.group(1)
        == f"Administrator approved 4 tools of search as in v4, resolving alert(s) #{alert_id}."
    )
    with world.store.sessions() as session:
        alert = session.scalar(select(Alert).where(Alert.id == world.alert_ids["open:read-only-revoked"]))
        assert alert is not None and alert.state == "resolved"

    again = browser.get(done.headers["location"]).text
    assert "Approve every tool as in v4" in again and "also resolve" not in again, "no 0 alerts offered"
    page = browser.get("/servers/search")
    assert decision_row(page.text, "lookup") == "allow"
    assert "also resolve" not in page.text
    revoked = browser.post("/servers/search/revoke?tool=lookup", data={"csrf_token": csrf_of(page)})
    assert revoked.status_code == 303
    assert decision_row(browser.get("/servers/search").text, "lookup") == "deny", "revoked"

    history = browser.get("/servers/search/tools/lookup").text
    assert 'revoked <span class="tool">lookup</span>' in history
    assert "the access-time update is intended" in history and "dashboard" not in history
    events = history[history.index("revoked") :]
    assert events.index("Administrator") < events.index("trust on first use"), (
        "newest first, each with its actor"
    )


def test_without_a_sign_in_the_forms_are_not_offered(world: World) -> None:
    with web_client(world.store, token=None, auth=None) as open_client:
        page = open_client.get("/servers/search")
        assert page.status_code == 200 and "Sign in to approve" in page.text
        assert "Approve every tool" not in page.text
        assert open_client.post("/servers/search/approve", data={}).status_code == 403


def test_the_server_page_reads_decisions_in_its_own_connection(world: World, database_url: str) -> None:
    """The server page shows what hosts are told, read through the decision cache. Must hold: it
    reads in the request's own connection, so a pool of one connection serves it. (It used to take a
    second one while holding the first: under load every pooled connection was held by a request
    waiting for another, and pages failed after the pool's 30 s timeout.)"""
    sqlite = database_url.startswith("sqlite")
    one = create_engine(
        database_url,
        pool_size=1,
        max_overflow=0,
        pool_timeout=2,
        connect_args={"check_same_thread": False} if sqlite else {},
    )
    try:
        with web_client(Store(one)) as client:
            page = client.get("/servers/search")
            assert page.status_code == 200, page.text[:300]
            assert decision_row(page.text, "wipe_index") == "allow"
    finally:
        one.dispose()


def test_a_copied_confirmation_address_asks_again_and_changes_nothing(
    browser: TestClient, world: World
) -> None:
    """`GET /servers/NAME/approve?tool=...&version=...`, the address every approve form leads to, as
    a person copies or bookmarks it. Must hold: someone not signed in is sent to sign in and back
    there; the approver sees the confirmation, which approves only when its own form is posted; a
    GET never changes anything; a tool or version that does not exist, or a version that is no
    number, is an error page saying which (a viewer is refused: the next test)."""
    url = "/servers/search/approve?tool=lookup&version=2"
    anonymous = browser.get(url)
    assert anonymous.status_code == 303
    assert anonymous.headers["location"] == "/login?" + urlencode({"next": url})
    sign_in(browser)
    revoked = world.alert_ids["open:read-only-revoked"]
    for _ in range(2):  # asked twice, as a reload would
        page = browser.get(url)
        assert page.status_code == 200, page.text[:300]
    shown = " ".join(page_text(page.text).split())
    assert "Approve lookup as in v2?" in shown and "It resolves 1 open alert" in shown
    assert 'action="/servers/search/approve?tool=lookup"' in page.text
    assert 'name="version" value="2"' in page.text and 'name="resolve_alerts" value="on"' in page.text
    assert '<a href="/servers/search#approvals">Cancel</a>' in page.text
    with world.store.sessions() as session:
        by_people = select(func.count()).select_from(Approval).where(Approval.actor != "trust on first use")
        assert session.scalar(by_people) == 0
        assert session.get_one(Alert, revoked).state == "open", "a GET changes nothing"

    kept = browser.get(url + "&resolve_alerts=off")
    assert "It resolves no alert" in page_text(kept.text) and 'name="resolve_alerts" value="off"' in kept.text
    for wrong, status, says in [
        ("/servers/search/approve?tool=nope&version=2", 404, "version 2 has no tool named 'nope'"),
        ("/servers/search/approve?tool=lookup&version=9", 404, "the server has no version 9"),
        ("/servers/search/approve?version=two", 422, "version: expected a whole number"),
        ("/servers/nobody/approve?tool=lookup", 404, "nobody"),
    ]:
        answer = browser.get(wrong)
        assert answer.status_code == status, (wrong, answer.status_code)
        assert says in page_text(answer.text) and "Traceback" not in answer.text, wrong

    confirm = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', page.text))
    done = browser.post("/servers/search/approve?tool=lookup", data=confirm)
    assert done.status_code == 303 and done.headers["location"] == "/servers/search#approvals"
    with world.store.sessions() as session:
        assert session.get_one(Alert, revoked).state == "resolved", "its own form approved"


def test_a_viewer_is_refused_the_confirmation(world: World) -> None:
    add_token(world.store, "vic", "viewer")
    with web_client(world.store, auth=None, follow_redirects=False) as viewer:
        hold_session(viewer, session_value(viewer.app, "vic"))  # type: ignore[arg-type]
        refused = viewer.get("/servers/search/approve?tool=lookup&version=2")
    assert refused.status_code == 403 and "approver" in page_text(refused.text)
