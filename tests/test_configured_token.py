"""The configured token is someone: `[monitor] api_token_name` (default "Administrator") is who signs in
with it and the actor of what it changes, on the pages, in the API and the audit log, while records
made under its former name, `config`, keep reading `config`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from support.web import AUTH, TOKEN, TOKEN_ENV, hold_session, make_app, page_text, session_value, web_client
from support.world import NOW, World

from monitor.config import Config, MonitorSettings, load_config
from monitor.core.roles import CONFIG_NAME, DEFAULT_TOKEN_NAME, Caller, Role, Via
from monitor.identity.storage import record_event
from monitor.notify import handling
from monitor.store.access import AuditEvent
from monitor.store.models import Alert


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, html[:300]
    return match.group(1)


def sign_in(browser: TestClient, next_path: str) -> str:
    """Sign in with the configured token on the sign-in page; the text of the page it leads to."""
    login = browser.get("/login")
    token = {"csrf_token": csrf_of(login.text), "token": TOKEN, "next": next_path}
    signed = browser.post("/login", data=token, follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == next_path
    return page_text(browser.get(next_path).text)


def test_the_configured_token_is_administrator_wherever_it_acts(world: World) -> None:
    revoked = world.alert_ids["open:read-only-revoked"]
    hidden = world.alert_ids["open:hidden-text-in-description"]
    with web_client(world.store, auth=None) as browser:
        landed = sign_in(browser, f"/alerts/{revoked}")
        assert "Signed in as Administrator (admin)." in landed, "the banner after signing in"
        assert re.search(r"Signed in as\s+Administrator\s+\(admin\)", landed), "the header"
        page = browser.get(f"/alerts/{revoked}").text
        assert ">Acknowledge — as Administrator</button>" in page
        assert ">Resolve — as Administrator</button>" in page
        assert " as config" not in page_text(page)
        acked = browser.post(
            f"/alerts/{revoked}/ack",
            data={"csrf_token": csrf_of(page), "note": "looking", "next": f"/alerts/{revoked}"},
        )
        assert "acknowledged by Administrator" in page_text(acked.text)
        assert ">Add a note — as Administrator</button>" in acked.text
        resolved = browser.post(f"/api/v1/alerts/{hidden}/resolve", json={"note": "benign"}, headers=AUTH)
        assert resolved.status_code == 200 and resolved.json()["resolved_by"] == "Administrator"
        for name in (DEFAULT_TOKEN_NAME, CONFIG_NAME):
            taken = browser.post("/api/v1/tokens", json={"name": name, "role": "viewer"}, headers=AUTH)
            assert taken.status_code == 409 and "configured token" in taken.json()["detail"]
        audit = page_text(browser.get("/audit").text)
    with world.store.sessions() as session:
        acknowledged_by = session.scalar(select(Alert.acknowledged_by).where(Alert.id == revoked))
        actors = set(session.scalars(select(AuditEvent.actor)))
    assert acknowledged_by == "Administrator"
    assert actors == {"Administrator"}, "sign-in, acknowledgement and resolution alike"
    assert "alert.acknowledge" in audit and "Administrator (admin, session)" in audit


def test_the_name_comes_from_the_config_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world: World
) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text('[monitor]\napi_token_name = "  Ops on call "\n', encoding="utf-8")
    assert load_config(path).monitor.api_token_name == "Ops on call", "the surrounding space cut"
    monkeypatch.setenv("DRIFT_MONITOR_API_TOKEN_NAME", "Night shift")
    assert load_config(path).monitor.api_token_name == "Night shift", "the environment wins"
    monkeypatch.delenv("DRIFT_MONITOR_API_TOKEN_NAME")
    assert MonitorSettings().api_token_name == DEFAULT_TOKEN_NAME
    for bad in ("", "   ", "line\nbreak"):
        with pytest.raises(ValueError, match="api_token_name"):
            MonitorSettings(api_token_name=bad)

    config = Config(monitor=MonitorSettings(api_token_env=TOKEN_ENV, api_token_name="ops-lead"))
    app = make_app(world.store, config)
    revoked = world.alert_ids["open:read-only-revoked"]
    with web_client(app, auth=None) as browser:
        # A session signed in before the rename names the configured token, not its name: it holds.
        hold_session(browser, session_value(app, CONFIG_NAME))
        page = browser.get(f"/alerts/{revoked}")
        assert page.status_code == 200 and ">Acknowledge — as ops-lead</button>" in page.text
        done = browser.post(f"/api/v1/alerts/{revoked}/ack", json={}, headers=AUTH)
        assert done.json()["acknowledged_by"] == "ops-lead"

        def make(name: str) -> int:
            return browser.post(
                "/api/v1/tokens", json={"name": name, "role": "viewer"}, headers=AUTH
            ).status_code

        assert make("ops-lead") == 409
        assert make(DEFAULT_TOKEN_NAME) == 201, "the default name is anyone's once the token has another"


def test_what_was_done_as_config_still_reads_config(world: World) -> None:
    """Rows an earlier release wrote under the configured token's old name keep it, on every page."""
    revoked = world.alert_ids["open:read-only-revoked"]
    earlier = Caller(CONFIG_NAME, Role.ADMIN, Via.TOKEN, "127.0.0.1")
    with world.store.sessions.begin() as session:
        handling.acknowledge(session, revoked, NOW, by=CONFIG_NAME, note="seen before the upgrade")
        record_event(session, earlier, "alert.acknowledge", f"alert {revoked}", at=NOW)
    with web_client(world.store, auth="session") as browser:
        alert = page_text(browser.get(f"/alerts/{revoked}").text)
        audit = page_text(browser.get("/audit").text)
        listed = browser.get(f"/api/v1/alerts/{revoked}", headers=AUTH).json()["alert"]
    assert "acknowledged by config" in alert and "seen before the upgrade" in alert
    assert "config (admin, token)" in audit
    assert listed["acknowledged_by"] == CONFIG_NAME
