"""Migration 0018 (tokens, the audit log, the web key) on a database the 0017 release filled: with
today's config (one `api_token`), that token is `config`, an admin, for the API, the dashboard and
the hooks, and answers as before; no named token exists until someone makes one; down to 0017 and up
again keeps every row of the older schema."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, inspect
from support import tool
from support.releases import OlderRows
from support.web import AUTH, TOKEN, page_text, web_client

from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store, current_revision, downgrade, migrate

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LOOKUP = [tool("lookup", description="Look a record up.", read_only=True)]


def test_the_configured_token_of_the_previous_release_keeps_working(fresh_engine: Engine) -> None:
    migrate(fresh_engine, "0017")
    with fresh_engine.begin() as connection:
        rows = OlderRows(connection, "servers", "listings", "tool_definitions", "listing_tools", "snapshots")
        rows.polled_server("old", CanonicalListing.of(LOOKUP), T0)
    migrate(fresh_engine)
    store = Store(fresh_engine)
    with web_client(store, auth=None, clock=T0, follow_redirects=False) as client:
        assert client.get("/api/v1/servers", headers=AUTH).json()["items"][0]["name"] == "old"
        asked = client.post("/api/v1/decisions", json={"server": "old", "tool": "lookup"}, headers=AUTH)
        assert asked.status_code == 200 and asked.json()["decision"] == "allow", "tofu, as before"
        hook = client.post(
            "/api/v1/hooks/claude-code",
            json={"hook_event_name": "PreToolUse", "tool_name": "mcp__old__lookup"},
            headers=AUTH,
        )
        assert hook.status_code == 200 and hook.json() == {}, "approved: no opinion, as before"
        approved = client.post("/api/v1/servers/old/approvals", json={"note": "kept"}, headers=AUTH)
        assert approved.status_code == 201 and approved.json()["approvals"][0]["actor"] == "Administrator"
        assert client.get("/api/v1/tokens", headers=AUTH).json() == [], "no named token yet"
        login = client.get("/login")
        token = login.text.split('name="csrf_token" value="')[1].split('"')[0]
        signed = client.post("/login", data={"csrf_token": token, "token": TOKEN, "next": "/"})
        assert signed.status_code == 303
        assert "Signed in as Administrator (admin)" in " ".join(page_text(client.get("/").text).split())
        audit = client.get("/api/v1/audit", headers=AUTH).json()["items"]
        assert {(e["action"], e["actor"]) for e in audit} >= {
            ("approval.approve", "Administrator"),
            ("auth.sign-in", "Administrator"),
        }

    downgrade(fresh_engine, "0017")
    assert current_revision(fresh_engine) == "0017"
    with fresh_engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
    assert not {"api_tokens", "audit_events", "web_keys"} & tables
    migrate(fresh_engine)
    with web_client(Store(fresh_engine), clock=T0) as client:
        assert (
            client.post("/api/v1/decisions", json={"server": "old", "tool": "lookup"}).json()["decision"]
            == "allow"
        )
