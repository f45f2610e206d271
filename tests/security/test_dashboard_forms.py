"""The dashboard against hostile servers and cross-site requests.

Hostile listings arrive the way they would in production: polled from real servers (an `MCPServer`
serving tools whose names, titles, descriptions, annotations, schemas and `_meta` are markup,
template syntax and invisible or bidi characters; a server whose error message is markup), through
the Poller and Store, with alerts and a host session that carry hostile text too. Then every page
route is fetched and parsed, and every form route is posted without, with wrong and with
cross-site CSRF credentials.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from security.security_harness import audit, form_csrf_token
from sqlalchemy import func, select
from support import faulty_http, server_command, tool
from support.web import TOKEN, TOKEN_ENV, app_routes, csrf_of, make_app, session_value, web_client

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.clients import DEFAULT_PROFILE, ClientProfile
from monitor.core.fingerprint import tool_fingerprint
from monitor.identity.signin import SESSION_COOKIE
from monitor.notify import silences
from monitor.notify.alerts import Alerting
from monitor.store import Store
from monitor.store.access import Approval, AuditEvent
from monitor.store.models import Alert
from monitor.web.middleware import CONTENT_SECURITY_POLICY
from monitor.web.refresh import REFRESH_COOKIE

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
HIDDEN = "Reads files.\u202eexe.gnp\u202c zero\u200bwidth \U000e0041\U000e0042 tags"
TEMPLATE = "{{ 7*7 }} {% raw %} ${7*7} #{7*7}"


def hostile_tools(version: int) -> list[dict[str, Any]]:
    lookup = tool(
        "lookup",
        description="Look a record up.",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        read_only=True,
    )
    tools = [
        lookup,
        tool(
            SCRIPT,
            description=f"{HIDDEN} {SCRIPT} {TEMPLATE}",
            input_schema={"type": "object", "properties": {IMG: {"type": "string", "description": SCRIPT}}},
            annotations={"readOnlyHint": True, "title": "<iframe src=//evil.example>", "x-<b>": "<style>"},
            title=IMG,
            _meta={"ui": "<script src=//evil.example/x.js></script>"},
        ),
    ]
    if version == 1:
        return tools
    flipped = {**lookup, "description": f"Look a record up {IMG} and write it.", "annotations": {}}
    tools[0] = flipped
    tools[1] = {**tools[1], "description": f"{tools[1]['description']} \u2066now\u2069 changed"}
    tools.append(tool(IMG, description="javascript:alert(1)"))
    return tools


@dataclass
class World:
    app: FastAPI
    store: Store
    alert_id: int
    tool_names: list[str]


@pytest.fixture
def world(store: Store, tmp_path: Path) -> Iterator[World]:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(hostile_tools(1)), encoding="utf-8")
    host_only = tmp_path / "host-only.json"  # listed to the default profile, not to the bare one
    host_only.write_text(json.dumps([tool(f"{IMG}host", description=f"{SCRIPT} {HIDDEN}")]), encoding="utf-8")
    command, *args = server_command("fastmcp_server.py", str(tools_file), "--sampling-tools", str(host_only))
    bare = ClientProfile(label="bare", name=SCRIPT, capabilities={})
    with faulty_http() as (base, _):
        config = Config(
            monitor=MonitorSettings(api_token_env=TOKEN_ENV, poll_timeout=20.0, alert_min_severity="high"),
            servers=[
                ServerConfig(
                    name="hostile",
                    transport="stdio",
                    command=command,
                    args=args,
                    client=[DEFAULT_PROFILE, bare],
                ),
                ServerConfig(name="html-error", transport="http", url=f"{base}/html-error/mcp"),
            ],
        )
        store.hooks.append(Alerting.from_config(config))
        poller = Poller(store, config)
        try:
            jobs = poller.jobs()

            async def polls() -> None:
                await poller.poll(jobs)
                tools_file.write_text(json.dumps(hostile_tools(2)), encoding="utf-8")
                await poller.poll(jobs[:1])
                await poller.poll(jobs[1:])
                await poller.poll(
                    jobs[1:]
                )  # a third failure: server-unreachable, whose message is the markup

            asyncio.run(polls())
        finally:
            poller.close()
    app = make_app(store, config, clock=None)
    with web_client(app) as client:
        report = client.post(
            "/api/v1/sessions",
            json={
                "server": "hostile",
                "session_id": f"{SCRIPT}\u202esession",
                "client": IMG,
                "connected_at": "2026-01-01T00:00:00Z",
                "tools": hostile_tools(1),
            },
        )
        assert report.status_code == 201, report.text
    with store.sessions() as session:
        alerts = session.scalars(select(Alert).where(Alert.state == "open")).all()
    assert {a.rule for a in alerts} >= {"read-only-revoked", "server-unreachable"}, [a.rule for a in alerts]
    yield World(app, store, alerts[0].id, [t["name"] for t in hostile_tools(2)])


def signed_in(app: FastAPI) -> TestClient:
    client = web_client(app, auth=None, follow_redirects=False)
    login = client.get("/login")
    response = client.post(
        "/login", data={"csrf_token": form_csrf_token(login.text), "token": TOKEN, "next": "/"}
    )
    assert response.status_code == 303 and SESSION_COOKIE in client.cookies
    return client


def page_urls(world: World) -> dict[str, list[str]]:
    """Concrete URLs for every page route, by its path template."""
    tools = [f"/servers/hostile/tools/{quote(name, safe='')}" for name in world.tool_names]
    return {
        "/": ["/", "/?min_severity=info", "/?status=failing"],
        "/servers/{name}": ["/servers/hostile", "/servers/html-error"],
        "/servers/{name}/diff": ["/servers/hostile/diff", "/servers/hostile/diff?from=1&to=2"],
        "/servers/{name}/views/diff": ["/servers/hostile/views/diff?view=bare"],
        "/servers/{name}/approve": [
            f"/servers/hostile/approve?tool={quote(name, safe='')}&version=2&note={quote(SCRIPT)}"
            for name in world.tool_names[:2]
        ],
        "/servers/{name}/tools/{tool:toolname}": tools,
        "/servers/{name}/tool": [
            f"/servers/hostile/tool?tool={quote(name, safe='')}" for name in world.tool_names
        ],
        "/servers/{name}/definitions/{fingerprint}": [
            f"/servers/hostile/definitions/{tool_fingerprint(definition)}" for definition in hostile_tools(2)
        ],
        "/alerts": [f"/alerts?state={s}" for s in ("open", "acknowledged", "resolved", "all")],
        "/alerts/{alert_id}": [f"/alerts/{world.alert_id}"],
        "/silences": ["/silences", f"/silences?server={quote(SCRIPT)}&tool={quote(IMG + HIDDEN)}"],
        "/servers/{name}/polls/{attempt_id}/raw": [],  # plain text, never HTML: test_invalid_listings.py
        "/sessions": ["/sessions", "/sessions?stale=1"],
        "/at": [
            "/at",
            "/at?server=hostile&time=2100-01-01T00:00:00Z",
            "/at?server=html-error&time=2000-01-01",
        ],
        "/login": ["/login", f"/login?next={quote('//evil.example/' + SCRIPT)}"],
        "/audit": ["/audit", "/audit?result=refused", f"/audit?result={quote(SCRIPT)}"],
        "/search": [
            f"/search?q={quote(name[:12], safe='')}&time=2100-01-01T00:00:00Z" for name in world.tool_names
        ]
        + [f"/search?q={quote(SCRIPT, safe='')}", "/search?q=e"],
    }


def test_every_page_renders_hostile_text_inert_and_visible(world: World) -> None:
    """Every page route (enumerated from the app, so a new page must be added here), signed in.
    Must hold: 200 with the strict CSP; no element, event handler, script URL or off-site link that
    a hostile string could have produced, and no raw invisible character anywhere; the markup is
    shown as text, template syntax is not evaluated, and hidden characters appear as marked U+XXXX.
    Error pages for hostile names hold to the same."""
    templates = {
        path for method, path, in_schema in app_routes(world.app) if method == "get" and not in_schema
    }
    templates = {p for p in templates if not p.startswith("/api/") and p not in ("/healthz", "/metrics")}
    urls = page_urls(world)
    assert templates == set(urls), "a page route without URLs to check here"
    client = signed_in(world.app)
    shown: dict[str, str] = {}
    for url in [u for group in urls.values() for u in group]:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, url
        page = audit(response.text)
        assert page.problems == [], (url, page.problems)
        assert "<script>alert" not in response.text, url
        shown[url] = response.text
    views_page = shown["/servers/hostile/views/diff?view=bare"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in views_page and "U+202E" in views_page
    server_page = shown["/servers/hostile"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in server_page
    assert "U+202E" in server_page and "U+200B" in server_page and "U+E0041" in server_page
    assert "{{ 7*7 }}" in server_page and "${7*7}" in server_page, "template syntax is shown, not run"
    assert "U+2066" in shown["/servers/hostile/diff?from=1&to=2"]
    assert "read-only-revoked" in shown["/servers/hostile/diff?from=1&to=2"]
    error_page = shown["/servers/html-error"]  # the client wrote the bidi controls out as \\u escapes
    assert "&lt;script&gt;alert(&#34;err&#34;)" in error_page and "\\u202egnp.exe" in error_page
    assert "&lt;script&gt;" in shown["/sessions"]
    for url in (
        f"/servers/{quote(SCRIPT, safe='')}",
        f"/servers/hostile/tools/{quote(IMG + HIDDEN, safe='')}",
        f"/servers/hostile/diff?from={quote(SCRIPT)}",
        f"/at?server=hostile&time={quote(IMG)}",
        f"/alerts?state={quote(SCRIPT)}",
        f"/alerts?server={quote(SCRIPT)}",
        f"/search?q=e&time={quote(IMG)}",
    ):
        response = client.get(url)
        assert response.status_code in (404, 422), (url, response.status_code)
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert audit(response.text).problems == [], (url, audit(response.text).problems)


# --- CSRF on every form ----------------------------------------------------------------------------


def foreign_session(app: FastAPI) -> str:
    """The session cookie `/login` hands to anybody: what a page on another port of this host can
    fetch, together with that session's CSRF token, and set as this browser's cookie."""
    response = web_client(app, auth=None).get("/login")
    return response.cookies[SESSION_COOKIE]


def test_every_form_refuses_missing_wrong_and_cross_site_csrf(world: World) -> None:
    """Every form route (the app's non-API POST routes), posted by a signed-in browser without a CSRF
    token, with one forged, with another session's (fetched from `/login` the way another page of
    this host can), with one of another deployment, and with its own but from another site
    (`Sec-Fetch-Site` cross-site or same-site, a foreign `Origin`, `Origin: null` as after a
    redirect from a sandboxed page). Must hold: 403, and nothing happened (no sign-in or sign-out,
    the alert still open, no approval); the same request with its own token from this origin works."""
    forms = sorted(p for m, p, in_schema in app_routes(world.app) if m == "post" and not in_schema)
    forms = [p for p in forms if not p.startswith("/api/")]
    assert forms == [
        "/alerts/{alert_id}/ack",
        "/alerts/{alert_id}/resolve",
        "/login",
        "/logout",
        "/refresh",
        "/servers/{name}/approve",
        "/servers/{name}/revoke",
        "/silences",
        "/silences/{silence_id}/expire",
    ], forms
    session = signed_in(world.app).cookies[SESSION_COOKIE]
    with world.store.sessions.begin() as db:
        other = db.scalars(select(Alert.id).where(Alert.state == "open", Alert.id != world.alert_id)).first()
        assert other is not None
        silence = silences.create_silence(
            db,
            server="hostile",
            tool=None,
            rule=None,
            ends_at=datetime.now(UTC) + timedelta(days=3650),
            created_by="ops",
            reason="test",
            now=datetime.now(UTC) - timedelta(days=3650),
        )
    new_silence = {"server": "hostile", "duration": "1h", "reason": SCRIPT}
    urls = {
        "/login": ("/login", {"token": TOKEN, "next": "/"}),
        "/logout": ("/logout", {}),
        "/alerts/{alert_id}/ack": (f"/alerts/{world.alert_id}/ack", {"next": "/alerts"}),
        "/refresh": ("/refresh", {"refresh": "off", "next": "/alerts"}),
        "/servers/{name}/approve": (
            f"/servers/hostile/approve?tool={quote(SCRIPT)}",
            {"version": "2", "confirm": "yes"},
        ),
        "/servers/{name}/revoke": ("/servers/hostile/revoke?tool=lookup", {"note": SCRIPT}),
        "/alerts/{alert_id}/resolve": (f"/alerts/{other}/resolve", {"note": "fixed"}),
        "/silences": ("/silences", new_silence),
        "/silences/{silence_id}/expire": (f"/silences/{silence.id}/expire", {}),
    }
    own = csrf_of(world.app, session)
    stolen = foreign_session(world.app)
    other_deployment = web_client(world.store, token="a-different-token-entirely", clock=None, auth=None)
    with other_deployment:
        foreign = csrf_of(other_deployment.app, session_value(other_deployment.app))  # type: ignore[arg-type]
    for form in forms:
        url, fields = urls[form]
        events_before = _approval_events(world)
        bad_cases: list[tuple[str, str, str | None, dict[str, str]]] = [
            ("no token", session, None, {}),
            ("forged", session, "0" * 64, {}),
            ("another session's, with that session's cookie", stolen, csrf_of(world.app, stolen), {}),
            ("another session's, with this session's cookie", session, csrf_of(world.app, stolen), {}),
            ("another deployment's", session, foreign, {}),
            ("cross-site", session, own, {"Sec-Fetch-Site": "cross-site"}),
            ("same-site (another port)", session, own, {"Sec-Fetch-Site": "same-site"}),
            ("Origin: null", session, own, {"Origin": "null"}),
            ("foreign origin", session, own, {"Origin": "https://evil.example"}),
            ("another port", session, own, {"Origin": "http://testserver:8081"}),
            ("foreign origin, same host name", session, own, {"Origin": "http://testserver.evil.example"}),
        ]
        for what, cookie, field, headers in bad_cases:
            if form in ("/login", "/logout", "/refresh") and cookie == stolen:
                continue  # these act on the poster's own browser: that session's own token works there
            response = _post(world.app, url, fields, cookie, field, headers)
            if cookie == stolen and response.status_code == 303:  # that session is nobody's: sign in first
                assert response.headers["location"].startswith("/login?next="), (form, what)
                continue
            assert response.status_code == 403, (form, what, response.status_code)
            set_cookie = response.headers.get("set-cookie", "")
            assert SESSION_COOKIE not in set_cookie, (form, what, "signed in or out anyway")
            assert REFRESH_COOKIE not in set_cookie, (form, what, "a preference set anyway")
            assert audit(response.text).problems == []
        if form == "/alerts/{alert_id}/ack":
            assert _alert_state(world) == "open", "a refused form acknowledged the alert"
        assert _approval_events(world) == events_before, "a refused form approved or revoked"
        if form.startswith("/silences"):
            with world.store.sessions() as db:
                active = [s.id for s in silences.list_silences(db, now=datetime.now(UTC), active_only=True)]
            assert silence.id in active and len(active) == (1 if form == "/silences" else 2), (
                "a refused form acted"
            )
        response = _post(world.app, url, fields, session, own, {"Origin": "http://testserver"})
        assert response.status_code == 303, (form, response.status_code, response.text[:300])
        if form == "/logout":
            session = signed_in(world.app).cookies[SESSION_COOKIE]
            own = csrf_of(world.app, session)
    assert _alert_state(world) == "acknowledged"
    assert _approval_events(world) == [("approve", SCRIPT), ("revoke", "lookup")]
    world.app.state.web.identity.log.flush()
    with world.store.sessions() as db:
        refused = db.scalar(select(func.count()).where(AuditEvent.result == "refused"))
    assert refused is not None and refused >= len(forms) * 10, "every refused post is in the audit log"


def _approval_events(world: World) -> list[tuple[str, str | None]]:
    with world.store.sessions() as session:
        return [(a.action, a.tool) for a in session.scalars(select(Approval).order_by(Approval.id))]


def _post(
    app: FastAPI,
    url: str,
    fields: dict[str, str],
    session: str,
    field: str | None,
    headers: dict[str, str],
) -> Any:
    client = web_client(app, auth=None, follow_redirects=False)
    client.cookies.set(SESSION_COOKIE, session)
    data = {**fields, **({"csrf_token": field} if field is not None else {})}
    return client.post(url, data=data, headers=headers)


def _alert_state(world: World) -> str:
    with world.store.sessions() as session:
        alert = session.get(Alert, world.alert_id)
        assert alert is not None
        return alert.state
