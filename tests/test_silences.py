"""Silences (issue: alerts people can trust): muted findings are stored and shown, open no alert, send
no webhook; a silence that ends resolves nothing. Through the store, the API, the pages and the CLI."""

from __future__ import annotations

import getpass
import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from support import cli, read_only_flip, record_poll, webhook_secret
from support.web import AUTH, hold_session, session_value, web_client

from monitor.config import ServerConfig
from monitor.core.findings import Severity
from monitor.notify import silences
from monitor.notify.alerts import Alerting
from monitor.sinks.base import WebhookConfig
from monitor.store import Store
from monitor.store.models import Alert, FindingRecord, WebhookDelivery
from monitor.store.registration import sync_servers

SECRET_ENV = "TEST_SILENCE_SECRET"
T0 = datetime(2026, 11, 4, 10, 0, tzinfo=UTC)


def listing(read_only: bool) -> list[dict[str, Any]]:
    return read_only_flip(read_only, "export", description="Export.")


@pytest.fixture
def muted_store(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, int]:
    monkeypatch.setenv(SECRET_ENV, webhook_secret(b"silence key"))
    webhook = WebhookConfig(
        name="ops", url="http://127.0.0.1:9/hook", secret_env=SECRET_ENV, min_severity=Severity.HIGH
    )
    store.hooks.append(Alerting([webhook], base_url="http://127.0.0.1:8000"))
    server_id = sync_servers(
        store, [ServerConfig(name="reports", transport="http", url="http://127.0.0.1:9/")], T0
    )["reports"]
    record_poll(store, server_id, listing(True), T0)
    return store, server_id


def outbox(store: Store) -> list[str]:
    with store.sessions() as session:
        return list(session.scalars(select(WebhookDelivery.event_type)))


def test_a_muted_finding_is_stored_opens_nothing_and_an_ending_silence_resolves_nothing(
    muted_store: tuple[Store, int],
) -> None:
    store, server_id = muted_store
    with store.sessions.begin() as session:
        silence = silences.create_silence(
            session,
            server="reports",
            tool="export",
            rule="read-only-revoked",
            ends_at=T0 + timedelta(hours=1),
            created_by="dana",
            reason="planned migration",
            now=T0,
        )
    record_poll(store, server_id, listing(False), T0 + timedelta(minutes=1))
    with store.sessions() as session:
        (finding,) = session.scalars(
            select(FindingRecord).where(FindingRecord.rule == "read-only-revoked")
        ).all()
        assert finding.silence_id == silence.id, "stored, marked muted"
        assert session.scalars(select(Alert)).all() == []
    assert outbox(store) == []

    with store.sessions.begin() as session:
        ended = silences.expire_silence(session, silence.id, T0 + timedelta(minutes=2))
        assert ended is not None and not ended.active
    record_poll(store, server_id, listing(False), T0 + timedelta(minutes=3))  # unchanged: nothing new
    assert outbox(store) == [], "an ending silence resolves and raises nothing by itself"

    record_poll(store, server_id, listing(True), T0 + timedelta(minutes=4))  # the next change is heard
    with store.sessions() as session:
        (alert,) = session.scalars(select(Alert)).all()
    assert alert.rule == "read-only-claimed" and outbox(store) == ["alert.opened"]


def test_a_silence_matches_only_what_it_names(muted_store: tuple[Store, int]) -> None:
    store, server_id = muted_store
    with store.sessions.begin() as session:
        silences.create_silence(
            session,
            server=None,
            tool="lookup",
            rule=None,
            ends_at=T0 + timedelta(hours=1),
            created_by="dana",
            reason="noisy",
            now=T0,
        )
    record_poll(store, server_id, listing(False), T0 + timedelta(minutes=1))  # export, not lookup
    with store.sessions() as session:
        (alert,) = session.scalars(select(Alert)).all()
    assert alert.tool == "export"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "at least one of server, tool or rule"),
        ({"rule": "no-such-rule"}, "unknown rule"),
        ({"server": "nope"}, "no server named"),
        ({"rule": "tool-added", "ends_at": T0 - timedelta(seconds=1)}, "not in the future"),
        ({"rule": "tool-added", "created_by": " "}, "who made it"),
    ],
)
def test_silences_that_cannot_be_kept_are_refused(
    muted_store: tuple[Store, int], fields: dict[str, Any], message: str
) -> None:
    store, _ = muted_store
    values: dict[str, Any] = {
        "server": None,
        "tool": None,
        "rule": None,
        "ends_at": T0 + timedelta(hours=1),
        "created_by": "dana",
        "reason": "why",
        **fields,
    }
    with store.sessions.begin() as session, pytest.raises(silences.SilenceError, match=message):
        silences.create_silence(session, now=T0, **values)


@pytest.fixture
def client(muted_store: tuple[Store, int]) -> Iterator[TestClient]:
    with web_client(muted_store[0], auth=None, follow_redirects=False) as test_client:
        yield test_client


def test_the_api_creates_lists_and_expires_silences(client: TestClient) -> None:
    body = {
        "server": "reports",
        "rule": "description-changed",
        "duration": "2h",
        "created_by": "sam",
        "reason": "rewording",
    }
    assert client.post("/api/v1/silences", json=body).status_code == 401
    created = client.post("/api/v1/silences", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    silence = created.json()
    assert (silence["server"], silence["rule"], silence["tool"], silence["active"]) == (
        "reports",
        "description-changed",
        None,
        True,
    )
    assert [s["id"] for s in client.get("/api/v1/silences?active=true", headers=AUTH).json()] == [
        silence["id"]
    ]
    both = client.post("/api/v1/silences", json={**body, "ends_at": "2030-01-01T00:00:00Z"}, headers=AUTH)
    assert both.status_code == 422 and "exactly one" in both.text
    unknown = client.post("/api/v1/silences", json={**body, "rule": "nope"}, headers=AUTH)
    assert unknown.status_code == 422 and "unknown rule" in unknown.text
    expired = client.delete(f"/api/v1/silences/{silence['id']}", headers=AUTH)
    assert expired.status_code == 200 and expired.json()["active"] is False
    assert client.get("/api/v1/silences?active=true", headers=AUTH).json() == []
    assert client.delete("/api/v1/silences/999999", headers=AUTH).status_code == 404


def test_the_silences_page_creates_and_expires_and_muted_findings_are_shown(
    muted_store: tuple[Store, int], client: TestClient
) -> None:
    web = client.app.state.web  # type: ignore[attr-defined]
    hold_session(client, session_value(client.app))
    page = client.get("/silences?server=reports")
    assert page.status_code == 200 and 'value="reports"' in page.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token
    form = {
        "csrf_token": token.group(1),
        "server": "reports",
        "rule": "",
        "tool": "export",
        "duration": "90d",
    }
    created = client.post("/silences", data={**form, "by": "mallory", "reason": "<b>known</b>"})
    assert created.status_code == 303, created.text
    listed = client.get(created.headers["location"]).text
    assert "&lt;b&gt;known&lt;/b&gt;" in listed and "Expire now" in listed
    assert "mallory" not in listed and "Administrator" in listed, "the signed-in name made it, not a field"
    refused = client.post("/silences", data={**form, "duration": "soon", "reason": "maintenance window"})
    assert refused.status_code == 422 and "Not created: How long:" in refused.text
    assert "&#39;soon&#39; is not a duration" in refused.text, "says what was wrong and how to write it"
    assert 'value="maintenance window"' in refused.text and 'value="export"' in refused.text, (
        "what was typed stays"
    )
    no_reason = client.post("/silences", data={**form, "other": "2h30m", "reason": ""})
    assert no_reason.status_code == 422 and 'value="2h30m"' in no_reason.text
    assert 'name="csrf_token"' in no_reason.text, "the form is there to send again"

    store, server_id = muted_store
    record_poll(store, server_id, listing(False), web.now() + timedelta(minutes=1))  # by the app's clock
    assert "(muted)" in client.get("/").text

    silence_id = re.search(r'action="/silences/(\d+)/expire"', listed)
    assert silence_id
    expired = client.post(f"/silences/{silence_id.group(1)}/expire", data={"csrf_token": token.group(1)})
    assert expired.status_code == 303 and "Expire now" not in client.get("/silences").text


@pytest.mark.slow
def test_the_cli_adds_lists_and_expires_silences(engine: Engine, database_url: str, tmp_path: Path) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[monitor]\ndatabase_url = "{database_url}"\n\n'
        '[[servers]]\nname = "reports"\ntransport = "http"\nurl = "http://127.0.0.1:9/mcp"\n'
    )
    sync_servers(
        Store(engine), [ServerConfig(name="reports", transport="http", url="http://127.0.0.1:9/mcp")], T0
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli("silence", *args, "--config", str(config)), capture_output=True, text=True, timeout=120
        )

    added = run(
        "add",
        "--server",
        "reports",
        "--rule",
        "tool-added",
        "--for",
        "1h",
        "--by",
        "dana",
        "--reason",
        "rollout",
    )
    assert added.returncode == 0, added.stderr
    assert "mutes server reports, rule tool-added" in added.stdout
    assert f"by command line ({getpass.getuser()}): for dana: rollout" in added.stdout
    listed = run("list")
    assert "active" in listed.stdout and "rollout" in listed.stdout
    silence_id = added.stdout.split()[1]
    assert run("expire", silence_id).returncode == 0
    assert run("list").stdout.strip() == "no active silences"
    refused = run("add", "--for", "1h", "--reason", "everything")
    assert refused.returncode == 2 and "at least one of server, tool or rule" in refused.stderr
