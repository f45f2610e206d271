"""The dashboard: every page renders hostile listings inert and visible, forms need CSRF, pages need sign-in.

Tool names, titles and descriptions are attacker-controlled, so each page is parsed and checked
for any element, attribute or raw invisible character a hostile server could have smuggled in.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import event, select
from support.tools import tool
from support.web import AUTH, TOKEN, TOKEN_ENV, hold_session, make_app, page_text, session_value, web_client
from support.world import HOSTILE_IMG, HOSTILE_SCRIPT, QUERY, T0, World, populate, record

from monitor.sessions import service as sessions
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert
from monitor.store.registration import sync_servers
from monitor.web.middleware import CONTENT_SECURITY_POLICY

RAW_HIDDEN = ("\u202e", "\u202c", "\U000e0041", "\U000e0042", "\u200b")


def is_auto_refresh(attrs: list[tuple[str, str | None]]) -> bool:
    """The one meta element a page may add: a reload of itself after a number of seconds (no URL)."""
    values = dict(attrs)
    return (
        values.get("http-equiv") == "refresh" and (values.get("content") or "").isdigit() and len(values) == 2
    )


class PageAudit(HTMLParser):
    """Collects what a hostile string could turn into: elements, handlers, URLs, marks in attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.problems: list[str] = []
        self.marks: list[str] = []
        self._in_mark = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag in ("script", "img", "iframe", "object", "embed", "svg", "math", "base", "meta") and not (
            tag == "meta" and ({"charset", "name"} & {k for k, _ in attrs} or is_auto_refresh(attrs))
        ):
            self.problems.append(f"<{tag}> element")
        for name, value in attrs:
            if name.startswith("on"):
                self.problems.append(f"{name}= handler on <{tag}>")
            if name == "style":
                self.problems.append(f"inline style on <{tag}>")
            echoed = tag == "input" and ("name", "q") in attrs  # the reader's own search, escaped
            if value and ("<mark" in value or ("<script" in value.lower() and not echoed)):
                self.problems.append(f"markup inside {name}= of <{tag}>: {value!r}")
            if (
                name in ("href", "src", "action")
                and value
                and re.match(r"\s*(javascript|data):", value, re.I)
            ):
                self.problems.append(f"{name}={value!r}")
        self._in_mark = tag == "mark"

    def handle_endtag(self, tag: str) -> None:
        if tag == "mark":
            self._in_mark = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_mark:
            self.marks.append(data)


def audit(response: Response) -> PageAudit:
    assert response.status_code == 200, (response.url, response.status_code, response.text[:500])
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    for char in RAW_HIDDEN:
        assert char not in html, (response.url, f"raw U+{ord(char):04X}")
    assert HOSTILE_SCRIPT not in html and "<img" not in html
    parser = PageAudit()
    parser.feed(html)
    assert parser.problems == [], (response.url, parser.problems)
    return parser


@pytest.fixture
def world(store: Store) -> World:
    world = populate(store)
    with store.sessions.begin() as session:
        sessions.register_session(
            session,
            server="search",
            session_id=HOSTILE_SCRIPT,
            client=HOSTILE_IMG + "\u202e",
            connected_at=T0,
            fingerprint=world.fingerprints[0],
            tools=None,
            now=T0,
        )
    return world


@pytest.fixture
def client(world: World) -> Iterator[TestClient]:
    with web_client(world.store, follow_redirects=False) as test_client:
        yield test_client


def page_paths() -> list[str]:
    hostile = quote(HOSTILE_SCRIPT, safe="")
    return [
        "/",
        "/?min_severity=high",
        "/?status=failing&min_severity=low",
        "/servers/search",
        "/servers/files",
        "/servers/search/diff",
        "/servers/search/diff?from=1&to=2",
        "/servers/search/diff?from=2&to=3",
        "/servers/search/diff?from=1&to=4",
        "/servers/search/diff?from=4&to=1",
        "/servers/search/tools/lookup",
        "/servers/search/tools/export",
        "/servers/search/tools/purge",
        f"/servers/search/tools/{hostile}",
        "/alerts",
        "/alerts?state=acknowledged",
        "/alerts?state=resolved",
        "/alerts?state=all",
        "/sessions",
        "/sessions?stale=1",
        "/at",
        "/at?server=search&time=2026-03-01T14:30",
        "/at?server=search&time=2026-03-01T11:00:00Z",
        "/login",
        "/alerts?state=unresolved&severity=critical",
        "/alerts?server=search&rule=tool-added",
        "/search?q=" + quote("<script", safe=""),
        "/search?q=o&time=2026-03-01T13:10",
        "/search?q=" + hostile + "&time=2026-03-01T16:00:00Z",
    ]


def test_every_page_renders_hostile_text_inert_and_visible(client: TestClient) -> None:
    marked: set[str] = set()
    for path in page_paths():
        page = audit(client.get(path))
        marked.update(page.marks)
    assert {"U+202E", "U+202C", "U+E0041", "U+E0042", "U+200B"} <= marked


def test_hidden_characters_are_marked_where_the_description_is_shown(client: TestClient) -> None:
    html = client.get("/servers/search").text
    assert '<mark class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE' in html
    assert ">U+E0041</mark>" in html and ">U+200B</mark>" in html
    assert "TRAP" in html  # the text between the controls is kept, just not reordered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    tool_page = client.get(f"/servers/search/tools/{quote(HOSTILE_SCRIPT, safe='')}")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in tool_page.text
    # in attributes the characters are spelled out as text, never as markup
    assert 'title="&lt;script&gt;' not in html
    sessions_page = client.get("/sessions").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in sessions_page and ">U+202E</mark>" in sessions_page


def test_diff_page_shows_findings_hints_word_diff_and_schema(client: TestClient) -> None:
    html = client.get("/servers/search/diff?from=1&to=2").text
    assert "v1 → v2" in html
    assert "findings as recorded" not in html and "as recorded when the change was detected" in html
    # severity as a coloured label with the word in it
    assert '<span class="sev sev-critical">critical</span>' in html
    assert "read-only-revoked" in html and "required-argument-added" in html
    assert "<del>" in html and "<ins>" in html and "update its access time" in html
    assert "inputSchema changes" in html and "<code>required</code>" in html
    assert "effective value changed" in html
    assert "(default)" in html  # lookup's destructiveHint now reads as the default
    computed = client.get("/servers/search/diff?from=1&to=4").text
    assert "computed now by the diff engine" in computed and "tool-removed" in computed
    assert "hidden-text-in-description" in computed or "New tool" in computed


def test_diff_page_shows_a_hint_sent_as_text_visibly(world: World, client: TestClient) -> None:
    """A hint sent as `"yes"` is read as hosts read it, and what was sent is on the page itself, not in
    a tooltip a phone cannot show."""
    files = [
        tool("read", description="Read a file.", input_schema=QUERY, annotations={"readOnlyHint": "yes"})
    ]
    record(world.store, world.files_id, files, T0 + timedelta(hours=2))
    html = client.get("/servers/files/diff?from=1&to=2").text
    assert (
        'sent <code class="val">&#34;yes&#34;</code>' in html or 'sent <code class="val">"yes"</code>' in html
    )
    assert "tooltip" not in html


def test_server_page_shows_versions_and_declared_versus_default_hints(client: TestClient) -> None:
    html = client.get("/servers/search").text
    for version in ("v1", "v2", "v3", "v4"):
        assert f'<th scope="row">{version}</th>' in html
    assert 'class="hint hint-default hint-yes"' in html  # purge: destructive by default
    assert "read-only: yes" in html and "destructive: n/a" in html
    files = client.get("/servers/files").text
    assert "failing" in files and "connection refused" in files


def test_point_in_time_page(client: TestClient) -> None:
    html = client.get("/at?server=search&time=2026-03-01T13:10:00Z").text
    assert "v2" in html and "In force since" in html and "lookup" in html
    gap = client.get("/at?server=search&time=2026-03-01T13:45").text
    assert "uncertain" in gap
    before = client.get("/at?server=search&time=2026-03-01T11:00").text
    assert "had no recorded listing at that time" in before
    assert client.get("/at?server=search&time=yesterday").status_code == 422
    assert client.get("/at?server=nope&time=2026-03-01T12:00").status_code == 404


def test_errors_are_html_pages(client: TestClient) -> None:
    missing = client.get("/servers/nope")
    assert missing.status_code == 404 and "no server named" in missing.text and "<h1>404" in missing.text
    assert missing.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert client.get("/?min_severity=huge").status_code == 422
    assert client.get("/servers/search/diff?from=1&to=99").status_code == 404
    assert client.get("/servers/search/diff?from=x").status_code == 422
    assert client.get("/nowhere").status_code == 404
    api_missing = client.get("/api/v1/nowhere")
    assert api_missing.status_code == 404 and api_missing.json() == {"detail": "Not Found"}


def test_security_headers_on_every_kind_of_response(client: TestClient) -> None:
    for path in ("/", "/static/style.css", "/api/v1/servers", "/healthz", "/metrics", "/nowhere"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert response.headers["x-frame-options"] == "DENY", path
    assert "script-src" not in CONTENT_SECURITY_POLICY and "default-src 'none'" in CONTENT_SECURITY_POLICY
    assert client.get("/").headers["cache-control"] == "no-store"
    assert "max-age" in client.get("/static/style.css").headers["cache-control"]


def test_templates_use_no_safe_filter_and_no_inline_script() -> None:
    from monitor.app import WEB

    for template in (WEB / "templates").glob("*.html"):
        text = template.read_text()
        assert "|safe" not in text.replace(" ", ""), template
        assert "<script" not in text and "style=" not in text, template
        assert "autoescape false" not in text, template


# --- sign-in and CSRF ------------------------------------------------------------------------


def csrf_of(response: Response) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', response.text)
    assert match, response.text[:300]
    return match.group(1)


def open_alert(world: World) -> int:
    return world.alert_ids["open:read-only-revoked"]


def alert_state(world: World, alert_id: int) -> str:
    with world.store.sessions() as session:
        state = session.scalar(select(Alert.state).where(Alert.id == alert_id))
    assert state is not None
    return state


@pytest.fixture
def browser(world: World) -> Iterator[TestClient]:
    """A client without the bearer header: it has to sign in like a person."""
    with web_client(world.store, auth=None, follow_redirects=False) as test_client:
        yield test_client


def sign_in(browser: TestClient) -> None:
    login = browser.get("/login?next=/alerts")
    response = browser.post("/login", data={"csrf_token": csrf_of(login), "token": TOKEN, "next": "/alerts"})
    assert response.status_code == 303 and response.headers["location"] == "/alerts"
    cookie = response.headers["set-cookie"]
    assert "dm_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert TOKEN not in cookie


def test_pages_need_a_sign_in_when_a_token_is_configured(browser: TestClient) -> None:
    redirect = browser.get("/alerts?state=open")
    assert redirect.status_code == 303
    assert redirect.headers["location"] == "/login?next=%2Falerts%3Fstate%3Dopen"
    assert browser.get("/static/style.css").status_code == 200
    assert browser.get("/login").status_code == 200
    hold_session(browser, "9999999999.deadbeef")
    assert browser.get("/").status_code == 303  # forged
    hold_session(browser, session_value(browser.app, at=time.time() - 3601))
    assert browser.get("/").status_code == 303  # signed, but expired
    hold_session(browser, session_value(browser.app))
    assert browser.get("/").status_code == 200
    browser.cookies.delete("dm_session")
    assert browser.get("/", headers=AUTH).status_code == 200  # the bearer token works for pages too


def test_login_checks_csrf_and_the_token(browser: TestClient) -> None:
    """The sign-in page hands out an anonymous session (HttpOnly, SameSite=Strict) and a CSRF token
    bound to it; signing in starts a new session, so a token or cookie known before is worth nothing."""
    login = browser.get("/login")
    cookie = login.headers["set-cookie"]
    assert "dm_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "dm_csrf" not in cookie
    token = csrf_of(login)
    assert browser.post("/login", data={"token": TOKEN}).status_code == 403  # no CSRF field
    assert browser.post("/login", data={"csrf_token": "x.y", "token": TOKEN}).status_code == 403
    wrong = browser.post("/login", data={"csrf_token": token, "token": "guess"})
    assert wrong.status_code == 401 and "not a valid token" in wrong.text
    assert "dm_session" not in wrong.headers.get("set-cookie", "")
    before = browser.cookies["dm_session"]
    offsite = browser.post("/login", data={"csrf_token": token, "token": TOKEN, "next": "//evil.example/"})
    assert offsite.status_code == 303 and offsite.headers["location"] == "/"
    signed_in = offsite.cookies["dm_session"]
    assert signed_in != before and TOKEN not in signed_in
    assert csrf_of(browser.get("/alerts")) != token, "a new session, a new CSRF token"
    hold_session(browser, before)
    assert browser.get("/alerts").status_code == 303, "the session from before the sign-in is nobody's"


def test_acknowledge_from_the_alerts_page(browser: TestClient, world: World) -> None:
    sign_in(browser)
    page = browser.get("/alerts")
    assert page.status_code == 200 and "Acknowledge" in page.text
    assert "Signed in as Administrator (admin)" in " ".join(page_text(page.text).split())
    token = csrf_of(page)
    alert_id = open_alert(world)

    missing = browser.post(f"/alerts/{alert_id}/ack", data={"next": "/alerts"})
    assert missing.status_code == 403 and "CSRF" in missing.text
    mismatched = browser.post(f"/alerts/{alert_id}/ack", data={"csrf_token": token + "x"})
    assert mismatched.status_code == 403
    cross = browser.post(
        f"/alerts/{alert_id}/ack", data={"csrf_token": token}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403 and "another origin" in cross.text
    fetch_site = browser.post(
        f"/alerts/{alert_id}/ack", data={"csrf_token": token}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert fetch_site.status_code == 403
    assert alert_state(world, alert_id) == "open"

    done = browser.post(
        f"/alerts/{alert_id}/ack",
        data={"csrf_token": token, "next": "/alerts?state=open"},
        headers={"Origin": "http://testserver"},
    )
    assert done.status_code == 303 and done.headers["location"] == "/alerts?state=open"
    assert alert_state(world, alert_id) == "acknowledged"
    after = browser.get(done.headers["location"])
    assert f"Alert {alert_id} acknowledged by Administrator." in after.text
    assert f"Alert {alert_id} acknowledged" not in browser.get("/alerts?state=open").text, "shown once"
    assert browser.post("/alerts/999999/ack", data={"csrf_token": token}).status_code == 404

    signed_out = browser.post("/logout", data={"csrf_token": token})
    assert signed_out.status_code == 303
    assert browser.get("/alerts").status_code == 303


def test_the_banner_says_only_what_the_server_chose(browser: TestClient) -> None:
    """The message after an action travels in a cookie the server signs: neither a query parameter
    nor a cookie someone else wrote can make a sentence appear in the banner."""
    sign_in(browser)
    sentence = "Your account is locked: call 555-0100"
    assert sentence not in browser.get("/alerts", params={"done": sentence, "message": sentence}).text
    browser.cookies.set("dm_flash", sentence)
    assert sentence not in browser.get("/alerts").text
    browser.cookies.set("dm_flash", f"{sentence}.{'0' * 64}")
    assert sentence not in browser.get("/alerts").text


def test_without_a_token_the_dashboard_is_read_only(world: World) -> None:
    with web_client(world.store, token=None, auth=None, follow_redirects=False) as browser:
        page = browser.get("/alerts")
        assert page.status_code == 200
        assert "Acknowledging needs an API token" in page.text and TOKEN_ENV in page.text
        assert 'action="/alerts/' not in page.text
        assert 'name="token"' not in browser.get("/login").text  # nothing to sign in with
        browser.cookies.set("dm_csrf", "x")
        forced = browser.post(f"/alerts/{open_alert(world)}/ack", data={"csrf_token": "x"})
        assert forced.status_code == 403
        assert alert_state(world, open_alert(world)) == "open"


def test_sessions_page_lists_stale_sessions_first(client: TestClient, world: World) -> None:
    client.app.state.web.clock = lambda: T0 + timedelta(hours=5)  # type: ignore[attr-defined]
    html = client.get("/sessions").text
    assert "stale" in html and "&lt;script&gt;" in html


def test_large_forms_are_refused(browser: TestClient) -> None:
    login = browser.get("/login")
    response = browser.post("/login", data={"csrf_token": csrf_of(login), "token": "x" * 20_000})
    assert response.status_code == 403 and "too large" in response.text


def test_pages_survive_odd_listings(store: Store) -> None:
    """Descriptions that are not strings, annotations that are not objects, hints that are strings."""
    from monitor.config import ServerConfig

    (server_id,) = sync_servers(
        store, [ServerConfig(name="odd", transport="http", url="https://o.example/")], T0
    ).values()
    odd: list[dict[str, Any]] = [
        {"name": "a", "description": {"text": "object"}, "annotations": "yes"},
        {"name": "b", "description": 5, "annotations": {"readOnlyHint": "true", "title": 7}, "title": None},
        {"name": "c/../d?x#y", "inputSchema": [1, 2], "outputSchema": {"type": "object"}},
    ]
    changed = [
        {"name": "a", "description": "now text\r\nwith CRLF", "annotations": {"readOnlyHint": True}},
        {"name": "b", "description": None, "annotations": None, "x-vendor": {"rev": 2}},
        {"name": "c/../d?x#y", "inputSchema": {"type": "object"}},
    ]
    record(store, server_id, odd, T0)
    record(store, server_id, changed, T0 + timedelta(hours=1))
    with web_client(store) as client:
        for path in (
            "/",
            "/servers/odd",
            "/servers/odd/diff",
            "/servers/odd/tools/a",
            "/servers/odd/tools/b",
            f"/servers/odd/tools/{quote('c/../d?x#y', safe='')}",
            "/at?server=odd&time=2026-03-01T12:00Z",
        ):
            audit(client.get(path))
        assert ">U+000D</mark>" in client.get("/servers/odd/diff").text


@pytest.mark.parametrize(
    "path",
    [
        "/servers/a%00b",
        "/servers/search/tools/a%00b",
        "/servers/search/tools/%ED%A0%80",
        "/servers/search/diff?from=99999999999&to=1",
        "/servers/search/diff?from=-1",
        "/servers/search?before=%00",
        "/alerts?before=99999999999",
        "/alerts?state=%00",
        "/at?server=a%00&time=2026-03-01T12:00",
        "/at?server=search&time=9999-12-31T23:59:59-23:59",
        "/at?server=search&time=0001-01-01T00:00:00%2B23:59",
        "/?min_severity=%00",
        "/login?next=%0d%0aSet-Cookie:x=1",
    ],
)
def test_odd_requests_never_crash_a_page(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code < 500, response.text[:300]
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


# --- the event loop --------------------------------------------------------------------------


def test_no_database_statement_runs_on_the_event_loop(world: World) -> None:
    """Handlers, dependencies and the exception handlers that render error pages reach the database
    only from the threadpool: a statement on the loop's own thread would stall every other request.
    Must hold for every page, a sign-in and a form post, API reads and writes, poll-now and errors."""
    on_loop: list[str] = []

    def note_loop_statement(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # a worker thread: no loop runs here
        on_loop.append(statement)

    async def poll_now(name: str) -> PollOutcome:
        raise LookupError(name)  # answered 404, after the server was looked up

    engine = world.store.engine
    event.listen(engine, "before_cursor_execute", note_loop_statement)
    try:
        app = make_app(world.store, poll_now=poll_now)
        with web_client(app, auth=None, follow_redirects=False) as browser:
            sign_in(browser)
            token = csrf_of(browser.get("/alerts"))
            for path in [*page_paths(), "/servers/nope", "/?min_severity=huge"]:
                assert browser.get(path).status_code in (200, 404, 422), path
            assert browser.post("/alerts/999999/ack", data={"csrf_token": token}).status_code == 404
            assert browser.post(f"/alerts/{open_alert(world)}/ack", data={}).status_code == 403
            done = browser.post(f"/alerts/{open_alert(world)}/ack", data={"csrf_token": token})
            assert done.status_code == 303
        with web_client(app) as api:
            for path in ("/api/v1/servers", "/api/v1/changes", "/api/v1/alerts", "/api/v1/sessions"):
                assert api.get(path).status_code == 200, path
            assert api.get("/metrics").status_code == 200
            assert api.post("/api/v1/servers/search/poll").status_code == 404
            new_server = {"name": "extra", "url": "https://e.example/mcp"}
            assert api.post("/api/v1/servers", json=new_server).status_code == 201
            assert api.delete("/api/v1/servers/extra").status_code == 204
            report = {
                "server": "search",
                "session_id": "s1",
                "connected_at": "2026-03-01T12:00:00Z",
                "fingerprint": world.fingerprints[3],
            }
            assert api.post("/api/v1/sessions", json=report).status_code == 201
            assert api.put("/api/v1/sessions/search/s1", json={}).status_code == 200
            assert api.delete("/api/v1/sessions/search/s1").status_code == 204
    finally:
        event.remove(engine, "before_cursor_execute", note_loop_statement)
    assert on_loop == []
