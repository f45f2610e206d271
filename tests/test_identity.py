"""Who may do what (docs/contract.md section 12): named tokens and their roles, the actor of every
change, token management by command and API, the audit log, and a person signed in by a trusted
authenticating proxy, on the real app and store."""

from __future__ import annotations

import getpass
import json
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, inspect, select, text
from support import cli, read_only_flip, record_poll, webhook_secret
from support.browser import live_app
from support.proxy import auth_proxy
from support.web import (
    AUTH,
    TOKEN,
    add_token,
    bearer,
    hold_session,
    make_app,
    page_text,
    session_value,
    web_client,
)
from support.world import NOW, T0, populate

from monitor.config import AuthSettings, Config, MonitorSettings, ServerConfig
from monitor.core.findings import Severity
from monitor.core.roles import Role
from monitor.notify.alerts import Alerting
from monitor.sinks.base import WebhookConfig
from monitor.store import Store
from monitor.store.access import ApiToken, AuditEvent
from monitor.store.models import Alert, WebhookDelivery
from monitor.store.registration import sync_servers

ROLES = [role.value for role in Role]


def _status(client: TestClient, secret: str, method: str, path: str, body: Any = None) -> int:
    return client.request(method, path, json=body, headers=bearer(secret)).status_code


def test_each_role_may_do_what_the_table_says_and_nothing_more(store: Store) -> None:
    """One token per role against one operation of each kind. Must hold: `decide` gets decisions,
    hooks and session reports and nothing else (not even a read); `viewer` reads and cannot act;
    `responder` acknowledges but cannot approve; `approver` approves but cannot register a server;
    `admin` does everything; every 403 names the role needed and the caller's."""
    world = populate(store)
    secrets = {role: add_token(store, f"t-{role}", role) for role in ROLES}
    alert = world.alert_ids["open:read-only-revoked"]
    operations: list[tuple[str, str, str, Any, str]] = [
        # (what, method, path, body, least role)
        ("decision", "POST", "/api/v1/decisions", {"server": "search", "tool": "lookup"}, "decide"),
        ("enforced", "GET", "/api/v1/servers/search/annotations/enforced", None, "any"),
        (
            "session report",
            "POST",
            "/api/v1/sessions",
            {
                "server": "search",
                "session_id": "s-1",
                "connected_at": "2026-03-01T12:00:00Z",
                "fingerprint": world.fingerprints[-1],
            },
            "decide",
        ),
        ("read", "GET", "/api/v1/servers", None, "viewer"),
        ("metrics", "GET", "/metrics", None, "viewer"),
        ("acknowledge", "POST", f"/api/v1/alerts/{alert}/ack", {"note": "looking"}, "responder"),
        (
            "silence",
            "POST",
            "/api/v1/silences",
            {"server": "files", "duration": "1h", "reason": "x"},
            "responder",
        ),
        ("approve", "POST", "/api/v1/servers/search/approvals", {"tools": ["lookup"]}, "approver"),
        (
            "register",
            "POST",
            "/api/v1/servers",
            {"name": "new", "transport": "http", "url": "https://new.example/mcp"},
            "admin",
        ),
        ("tokens", "GET", "/api/v1/tokens", None, "admin"),
        ("audit", "GET", "/api/v1/audit", None, "admin"),
    ]
    ladder = ["viewer", "responder", "approver", "admin"]
    with web_client(store, auth=None) as client:
        for what, method, path, body, least in operations:
            for role in ROLES:
                if least == "any":  # what decisions rest on: a read, and a host's question
                    allowed = True
                elif least == "decide":
                    allowed = role in ("decide", "admin")
                else:
                    allowed = role != "decide" and ladder.index(role) >= ladder.index(least)
                response = client.request(method, path, json=body, headers=bearer(secrets[role]))
                if allowed:
                    assert response.status_code in (200, 201), (
                        what,
                        role,
                        response.status_code,
                        response.text,
                    )
                    continue
                assert response.status_code == 403, (what, role, response.status_code)
                detail = response.json()["detail"]
                assert f"this needs the role {least}" in detail and f"t-{role} has the role {role}" in detail
        hook = client.post(
            "/api/v1/hooks/claude-code",
            json={"hook_event_name": "PreToolUse", "tool_name": "mcp__search__lookup"},
            headers=bearer(secrets["viewer"]),
        )
        assert hook.status_code == 200, "a host hook answers every caller"
        answer = hook.json()["hookSpecificOutput"]
        assert answer["permissionDecision"] == "deny" and "role decide" in answer["permissionDecisionReason"]
    with store.sessions() as session:
        used = {name: at for name, at in session.execute(select(ApiToken.name, ApiToken.last_used_at))}
    assert all(used[f"t-{role}"] is not None for role in ROLES), "each token's last use is kept"


def test_revoked_expired_and_unknown_tokens_are_refused(store: Store) -> None:
    populate(store)
    revoked = add_token(store, "gone", "admin")
    expired = add_token(store, "old", "admin", expires=timedelta(hours=1), at=NOW - timedelta(hours=2))
    fine = add_token(store, "fine", "viewer")
    with web_client(store, auth=None) as client:
        assert _status(client, fine, "GET", "/api/v1/servers") == 200
        assert _status(client, revoked, "GET", "/api/v1/servers") == 200
        assert client.delete("/api/v1/tokens/gone", headers=AUTH).status_code == 200
        for secret in (revoked, expired, fine + "x", "dm_" + "A" * 43):
            response = client.get("/api/v1/servers", headers=bearer(secret))
            assert response.status_code == 401, secret
            assert response.headers["www-authenticate"] == "Bearer"
        listed = {t["name"]: t for t in client.get("/api/v1/tokens", headers=AUTH).json()}
        assert listed["gone"]["revoked_by"] == "Administrator" and listed["gone"]["revoked_at"] is not None
        assert "secret" not in json.dumps(listed) and revoked not in json.dumps(listed)


def test_the_tokens_api_shows_a_secret_once_and_stores_only_its_hash(store: Store, engine: Engine) -> None:
    """Must hold: the secret is in the create answer only, never in a list, a later answer or any
    row of any table; a name is made once; the new token works with the role it was given."""
    with web_client(store, auth=None) as client:
        made = client.post(
            "/api/v1/tokens", json={"name": "ci", "role": "viewer", "expires": "30d"}, headers=AUTH
        )
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
        assert made.json()["role"] == "viewer" and made.json()["created_by"] == "Administrator"
        assert made.json()["expires_at"] is not None
        assert (
            client.post("/api/v1/tokens", json={"name": "ci", "role": "admin"}, headers=AUTH).status_code
            == 409
        )
        assert (
            client.post("/api/v1/tokens", json={"name": "config", "role": "admin"}, headers=AUTH).status_code
            == 409
        )
        assert _status(client, secret, "GET", "/api/v1/servers") == 200
        assert _status(client, secret, "POST", "/api/v1/tokens", {"name": "x", "role": "admin"}) == 403
        assert secret not in client.get("/api/v1/tokens", headers=AUTH).text
    assert secret not in _every_text(engine) and TOKEN not in _every_text(engine)


def _every_text(engine: Engine) -> str:
    """Every value of every table, as text: where a secret stored in clear would show."""
    found: list[str] = []
    with engine.connect() as connection:
        for table in inspect(engine).get_table_names():
            for row in connection.execute(text(f'SELECT * FROM "{table}"')):
                found += [value.hex() if isinstance(value, bytes) else str(value) for value in row]
    return "\n".join(found)


@pytest.mark.slow
def test_the_token_commands(tmp_path: Path, database_url: str, engine: Engine) -> None:
    """`token create` prints the secret alone on the last line of stdout; `list` never shows it;
    `revoke` refuses it from then on; each is in the audit log as the command line's user."""
    config = tmp_path / "monitor.toml"
    config.write_text(f'[monitor]\ndatabase_url = "{database_url}"\n')

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli("token", *args, "--config", str(config)), capture_output=True, text=True, timeout=120
        )

    made = run("create", "laptop-ana", "--role", "decide", "--expires", "90d")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.splitlines()[-1]
    assert made.stdout == secret + "\n" and len(secret) >= 40, "the secret alone, on the last line"
    assert "laptop-ana" in made.stderr and "decide" in made.stderr
    assert run("create", "laptop-ana", "--role", "admin").returncode != 0, "a name is made once"
    bad_role = run("create", "x", "--role", "root")
    assert bad_role.returncode == 2 and "invalid choice" in bad_role.stderr
    listed = run("list")
    assert "laptop-ana" in listed.stdout and "decide" in listed.stdout and secret not in listed.stdout
    store = Store(engine)
    with web_client(store, auth=None, token=None) as client:
        asked = _status(client, secret, "POST", "/api/v1/decisions", {"server": "x", "tool": "y"})
        assert asked == 404, "let in, to hear that no server is named x"
        assert run("revoke", "laptop-ana").returncode == 0
        assert _status(client, secret, "POST", "/api/v1/decisions", {"server": "x", "tool": "y"}) == 401
    assert "revoked by command line" in run("list").stdout
    assert run("revoke", "nobody").returncode != 0
    assert secret not in _every_text(engine)
    with store.sessions() as session:
        events = session.execute(select(AuditEvent.action, AuditEvent.actor).order_by(AuditEvent.id)).all()
    actor = f"command line ({getpass.getuser()})"
    assert [(a, b) for a, b in events if a.startswith("token.")] == [
        ("token.create", actor),
        ("token.revoke", actor),
    ]


def test_the_actor_is_the_token_everywhere_and_the_audit_log_has_every_change_and_refusal(
    store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An approver approves through the API with a note and a `by` of an earlier release. Must hold:
    the approval's actor, the resolved alert's `resolved_by`, the webhook payload's `by` and the
    audit entry all name the token; `by` is kept as note text only; a viewer's refused attempt and a
    wrong token are in the audit log with where they came from."""
    monkeypatch.setenv("TEST_IDENTITY_SECRET", webhook_secret(b"identity key"))
    webhook = WebhookConfig(
        name="ops",
        url="http://127.0.0.1:9/hook",
        secret_env="TEST_IDENTITY_SECRET",
        min_severity=Severity.HIGH,
    )
    alerting = Alerting([webhook], base_url="http://testserver")
    store.hooks.append(alerting)
    server_id = sync_servers(
        store, [ServerConfig(name="tenants", transport="http", url="http://127.0.0.1:9/")], T0
    )["tenants"]
    record_poll(store, server_id, read_only_flip(True), T0)
    record_poll(store, server_id, read_only_flip(False), T0 + timedelta(minutes=1))
    ana = bearer(add_token(store, "ana", "approver"))
    viewer = bearer(add_token(store, "vic", "viewer"))
    caplog.set_level("INFO")
    with web_client(store, auth=None, alerting=alerting) as client:
        refused = client.post("/api/v1/servers/tenants/approvals", json={}, headers=viewer)
        assert refused.status_code == 403
        assert client.get("/api/v1/servers", headers=bearer("wrong")).status_code == 401
        approved = client.post(
            "/api/v1/servers/tenants/approvals",
            json={"version": 2, "note": "intended", "by": "someone else"},
            headers=ana,
        )
        assert approved.status_code == 201, approved.text
        assert {a["actor"] for a in approved.json()["approvals"]} == {"ana"}
        assert {a["note"] for a in approved.json()["approvals"]} == {"for someone else: intended"}
        history = client.get("/api/v1/servers/tenants/approvals", headers=ana).json()
        assert history[0]["actor"] == "ana"
        client.app.state.web.identity.log.flush()  # type: ignore[attr-defined]
        audit = client.get("/api/v1/audit", headers=AUTH).json()["items"]
        assert client.get("/api/v1/audit", headers=ana).status_code == 403
    with store.sessions() as session:
        alert = session.scalars(select(Alert).where(Alert.rule == "read-only-revoked")).one()
        bodies = [json.loads(b) for b in session.scalars(select(WebhookDelivery.body))]
    assert (alert.state, alert.resolved_by, alert.resolve_note) == (
        "resolved",
        "ana",
        "approved as in v2: for someone else: intended",
    )
    resolved = [b for b in bodies if b["type"] == "alert.resolved"]
    assert [(b["by"], b["alert"]["id"]) for b in resolved] == [("ana", alert.id)]
    opened = [b for b in bodies if b["type"] == "alert.opened"]
    assert opened and all(b["by"] is None for b in opened), "opening is the monitor's own doing"
    by_action = {(e["action"], e["actor"], e["result"]) for e in audit}
    assert ("approval.approve", "ana", "ok") in by_action
    assert ("role.refused", "vic", "refused") in by_action
    assert ("auth.refused", "an unknown token", "refused") in by_action
    assert all(e["source"] == "testclient" for e in audit if e["actor"] in ("ana", "vic"))
    logged = [
        r.getMessage() for r in caplog.records if r.name in ("drift_monitor.audit", "drift_monitor.alerts")
    ]
    assert "approval.approve tenants by ana (approver, token) from testclient" in logged
    assert any("resolved" in line and "approved by ana as in v2" in line for line in logged), logged
    approve = next(e for e in audit if e["action"] == "approval.approve")
    assert approve["target"] == "tenants" and approve["role"] == "approver"


def test_a_person_behind_a_trusted_proxy_is_named_and_a_forged_header_is_not(store: Store) -> None:
    """oauth2-proxy in front of the dashboard, connecting from 127.0.0.2 (the only trusted address).
    Must hold: through the proxy, the person is signed in with the role their group gives and is
    the actor of what they do; the same header sent straight to the monitor from 127.0.0.1 is
    nobody's; a person the config names no role for gets none."""
    populate(store)
    auth = AuthSettings(
        proxy_header="X-Forwarded-Email",
        proxy_groups_header="X-Forwarded-Groups",
        trusted_proxies=["127.0.0.2/32"],
        users={"ana@example.com": Role.VIEWER},
        groups={"sre": Role.RESPONDER},
    )
    config = Config(
        monitor=MonitorSettings(api_token_env="DRIFT_MONITOR_TEST_API_TOKEN", poll_interval=3600), auth=auth
    )
    app = make_app(store, config)
    import httpx

    with live_app(app) as monitor:
        with (
            auth_proxy(
                monitor, {"X-Forwarded-Email": "ana@example.com", "X-Forwarded-Groups": "dev, sre"}
            ) as proxy,
            httpx.Client(base_url=proxy, follow_redirects=False) as browser,
        ):
            page = browser.get("/alerts")
            assert page.status_code == 200, page.text[:300]
            shown = " ".join(page_text(page.text).split())
            assert "Signed in as ana@example.com (responder)" in shown, (
                "the higher of her user and group roles"
            )
            assert "Sign out" not in page.text, "the proxy signs people out, not the monitor"
            assert browser.get("/audit").status_code == 403
        eve = {"X-Forwarded-Email": "eve@example.com"}
        with (
            auth_proxy(monitor, eve) as proxy,
            httpx.Client(base_url=proxy, follow_redirects=False) as browser,
        ):
            refused = browser.get("/alerts")
            assert refused.status_code == 403 and "eve@example.com has no role here" in refused.text
            assert "open alert" not in refused.text.lower()
        with httpx.Client(base_url=monitor, follow_redirects=False) as direct:
            forged = direct.get(
                "/alerts", headers={"X-Forwarded-Email": "ana@example.com", "X-Forwarded-Groups": "sre"}
            )
            assert forged.status_code == 303 and forged.headers["location"].startswith("/login")
            api = direct.get("/api/v1/servers", headers={"X-Forwarded-Email": "ana@example.com"})
            assert api.status_code == 401
    app.state.web.identity.log.flush()
    with store.sessions() as session:
        sources = set(session.scalars(select(AuditEvent.source).where(AuditEvent.actor == "eve@example.com")))
    assert sources == {"127.0.0.2"}


def test_anonymous_pages_say_nothing_about_the_fleet(store: Store) -> None:
    """The sign-in page and error pages seen before signing in: no counts, names or states."""
    populate(store)
    with web_client(store, auth=None, follow_redirects=False) as anonymous:
        for path in ("/login", "/login?next=/servers/search", "/static/none.css", "/no-such-page"):
            page = anonymous.get(path)
            assert page.status_code in (200, 303, 404), path
            for word in ("files", "wipe_index", "lookup", "critical", "open alert", "acknowledged"):
                assert word not in page.text, (path, word)
            assert "/servers/" not in page.text.replace('value="/servers/search"', ""), path


DECIDE_OPERATIONS = {
    ("post", "/api/v1/decisions"),
    ("get", "/api/v1/servers/{name}/annotations/enforced"),
    ("post", "/api/v1/sessions"),
    ("put", "/api/v1/sessions/{server}/{session_id}"),
    ("delete", "/api/v1/sessions/{server}/{session_id}"),
}
READS_BY_POST = {("post", "/api/v1/fingerprint")}
"""A POST that changes nothing: it computes a fingerprint of the listing sent."""
ADMIN_READS = {("get", "/api/v1/tokens"), ("get", "/api/v1/audit")}


def test_every_operation_checks_a_role(store: Store) -> None:
    """Each operation of the OpenAPI document, asked with a `decide` token and with a `viewer` one.
    Must hold: the decide token gets 403 everywhere but decisions, enforced annotations and session
    reports; the viewer gets 403 on every change; both get a deny from the host hooks. So a route
    added without a permission fails here."""
    from security.security_harness import api_operations, fill_path

    from monitor.approvals.hosts import HOOK_PATHS

    populate(store)
    decide, viewer = bearer(add_token(store, "d", "decide")), bearer(add_token(store, "v", "viewer"))
    with web_client(store, auth=None) as client:
        schema = client.get("/api/v1/openapi.json", headers=AUTH).json()
        checked = 0
        for method, path, operation in api_operations(schema):
            if path in ("/healthz", "/api/v1/healthz"):
                continue  # liveness, open to anybody
            url = fill_path(path, operation, {"name": "search"})
            for who, headers in (("decide", decide), ("viewer", viewer)):
                response = client.request(method, url, headers=headers, json={})
                if path in HOOK_PATHS:
                    answer = response.json()
                    assert response.status_code == 200, (who, path)
                    if who == "viewer":
                        assert answer == {"allow": False} or "deny" in json.dumps(answer), (path, answer)
                    continue
                if who == "decide":
                    refused = (method, path) not in DECIDE_OPERATIONS
                else:
                    refused = (method != "get" and (method, path) not in READS_BY_POST) or (
                        method,
                        path,
                    ) in ADMIN_READS
                if refused:
                    assert response.status_code == 403, (
                        who,
                        method,
                        path,
                        response.status_code,
                        response.text,
                    )
                    checked += 1
                else:
                    assert response.status_code != 403, (who, method, path, response.text)
    assert checked >= 40


def test_the_api_never_takes_the_dashboards_cookie_or_a_proxys_header(store: Store) -> None:
    """A browser signed in to the dashboard sends its cookie with any request to the host, including
    one a page of another port makes it send (`fetch` with credentials needs no preflight for a POST
    without a body). Must hold: the API answers such a request 401 and acts on nothing: its changes
    carry no CSRF token, so only a token authenticates them."""
    world = populate(store)
    add_token(store, "ana", "admin")
    with web_client(store, auth=None, follow_redirects=False) as browser:
        hold_session(browser, session_value(browser.app, "ana"))  # type: ignore[arg-type]
        assert browser.get("/servers/search").status_code == 200, "signed in on the dashboard"
        for method, path in (
            ("GET", "/api/v1/servers"),
            ("POST", "/api/v1/servers/search/approvals"),
            ("POST", f"/api/v1/alerts/{world.alert_ids['open:read-only-revoked']}/ack"),
            ("POST", "/api/v1/tokens"),
        ):
            response = browser.request(method, path, headers={"Origin": "http://127.0.0.1:9999"})
            assert response.status_code == 401, (method, path, response.status_code)
    with store.sessions() as session:
        alert = session.get_one(Alert, world.alert_ids["open:read-only-revoked"])
        assert alert.state == "open"
        assert session.scalars(select(ApiToken.name)).all() == ["ana"]
