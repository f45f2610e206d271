"""Client profiles: a server polled as several clients is stored as several views, and views that
differ raise `listing-varies-by-client` (high when the monitor's view is the safer one: cloaking).

Real servers over stdio (tests/servers/fastmcp_server.py with `--vary-by-client`), real databases.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from support import tool
from support.servers import SERVERS
from support.web import web_client

from monitor.collect.poller import Poller
from monitor.config import Config, ConfigError, MonitorSettings, ServerConfig, load_config
from monitor.notify.alerts import Alerting
from monitor.sessions.service import list_sessions
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert, ClientView, FindingRecord

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

TOOLS = [
    tool("list_notes", read_only=True, description="List notes."),
    tool("purge_notes", read_only=False, destructive=True, description="Delete every note."),
]
BARE = {"name": "bare-host", "version": "1.0", "capabilities": {}}
CLAUDE = {"name": "claude-code", "version": "2.0.0"}


def varying_server(tmp_path: Path, mode: str, profiles: list[dict[str, Any]]) -> ServerConfig:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS))
    return ServerConfig.model_validate(
        {
            "name": "notes",
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVERS / "fastmcp_server.py"), str(tools_file), "--vary-by-client", mode],
            "client": profiles,
        }
    )


def poll(store: Store, server: ServerConfig) -> PollOutcome:
    config = Config(monitor=MonitorSettings(poll_timeout=20), servers=[server], source="test")
    poller = Poller(store, config)
    try:
        (outcome,) = asyncio.run(poller.poll(poller.jobs()))
    finally:
        poller.close()
    assert outcome.ok, outcome.error
    assert outcome.view_errors == {}
    return outcome


def views(store: Store) -> dict[str, tuple[int, dict[str, Any]]]:
    with store.sessions() as session:
        rows = session.scalars(select(ClientView).order_by(ClientView.id)).all()
        return {row.profile: (row.listing_id, row.client) for row in rows}


@pytest.mark.slow
def test_one_more_tool_for_clients_declaring_sampling(store: Store, tmp_path: Path) -> None:
    """The default profile declares sampling like common hosts; a bare one does not. Must hold: two
    views with different listings, and a medium finding that names the tool only one of them gets."""
    server = varying_server(tmp_path, "sampling", [BARE, {}])
    first = poll(store, server)
    stored = views(store)
    assert set(stored) == {"bare-host", "claude-code"}
    assert stored["bare-host"][0] != stored["claude-code"][0], "two listings, one per view"
    assert stored["claude-code"][1]["capabilities"] == {
        "roots": {"listChanged": True},
        "sampling": {},
        "elicitation": {},
    }
    assert first.tool_count == 2, "the primary (first) profile's listing is the server's version"
    (varies,) = [f for f in first.findings if f.rule == "listing-varies-by-client"]
    assert varies.tool == "sample_summary" and varies.severity == "medium"
    assert varies.detail["only_in"] == "claude-code"
    assert "sample_summary" in varies.message and "'bare-host'" in varies.message

    again = poll(store, server)
    assert again.findings == [] and not again.new_version, "unchanged views raise nothing again"
    assert len(views(store)) == 2


def test_a_tool_read_only_only_for_the_monitor_is_cloaking(store: Store, tmp_path: Path) -> None:
    """The server marks every tool read-only for a client named drift-monitor and not for Claude Code.
    Must hold: a high finding for the tool that is read-only only in the monitor's view, and an alert."""
    store.hooks.append(Alerting(base_url="http://127.0.0.1:8000"))
    server = varying_server(tmp_path, "cloak", [{"name": "drift-monitor"}, CLAUDE])
    outcome = poll(store, server)
    varies = {f.tool: f for f in outcome.findings if f.rule == "listing-varies-by-client"}
    assert set(varies) == {"list_notes", "purge_notes"}
    assert varies["list_notes"].severity == "high", (
        "read-only for every client, but the two declare the same capabilities: told apart by name alone"
    )
    assert "same capabilities" in varies["list_notes"].message
    cloaked = varies["purge_notes"]
    assert cloaked.severity == "high" and cloaked.field == "annotations.readOnlyHint"
    assert (cloaked.old, cloaked.new) == (True, False)
    assert "'drift-monitor'" in cloaked.message and "cloaking" in cloaked.message
    with store.sessions() as session:
        alerts = session.scalars(select(Alert).where(Alert.rule == "listing-varies-by-client")).all()
        assert {(a.tool, a.severity, a.state) for a in alerts} == {
            ("list_notes", "high", "open"),
            ("purge_notes", "high", "open"),
        }
        stored = session.scalars(
            select(FindingRecord).where(
                FindingRecord.rule == "listing-varies-by-client", FindingRecord.tool == "purge_notes"
            )
        ).one()
        assert stored.detail["annotations"]["readOnlyHint"] == {"drift-monitor": True, "claude-code": False}


@pytest.mark.slow
def test_views_in_the_api_the_dashboard_and_host_sessions(store: Store, tmp_path: Path) -> None:
    """Must hold: the API lists both views (primary first) and the server's profiles; the server page
    shows them; a host session is compared with the view that declared what the host declared."""
    poll(store, varying_server(tmp_path, "sampling", [BARE, {}]))
    with web_client(store) as client:
        listed = client.get("/api/v1/servers/notes/views").json()
        assert [(v["profile"], v["tool_count"], v["same_as_primary"]) for v in listed] == [
            ("bare-host", 2, True),
            ("claude-code", 3, False),
        ]
        server = client.get("/api/v1/servers/notes").json()
        assert [c["name"] for c in server["client"]] == ["bare-host", "claude-code"]
        page = client.get("/servers/notes")
        assert page.status_code == 200 and "Client views" in page.text and "differs" in page.text
        bare, full = (v["fingerprint"] for v in listed)
        later = datetime.now(UTC) - timedelta(hours=1)
        for session_id, capabilities, held in (
            ("s-bare", {}, bare),
            ("s-host", {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}, full),
            ("s-wrong", {"sampling": {}, "roots": {}, "elicitation": {}}, bare),
        ):
            answer = client.post(
                "/api/v1/sessions",
                json={
                    "server": "notes",
                    "session_id": session_id,
                    "client": "some-host/1",
                    "connected_at": later.isoformat(),
                    "client_capabilities": capabilities,
                    "fingerprint": held,
                },
            )
            assert answer.status_code == 201, answer.text
            assert answer.json()["stale"] is False
    with store.sessions() as session:
        now = datetime.now(UTC) + timedelta(hours=1)
        records = {r.session_id: r for r in list_sessions(session, stale_only=False, now=now)}
    assert not records["s-bare"].stale and records["s-bare"].current_fingerprint == bare
    assert not records["s-host"].stale and records["s-host"].current_fingerprint == full
    assert records["s-wrong"].stale, "declared what the full view declared, but holds the bare listing"


def test_client_profiles_in_the_config_file(tmp_path: Path) -> None:
    """One table or an array of them; a bad profile names the file, the server and the field."""
    config = tmp_path / "monitor.toml"
    server = '[[servers]]\nname = "a"\ntransport = "http"\nurl = "http://127.0.0.1:9/mcp"\n'
    config.write_text(
        server + 'client = { name = "claude-code", version = "2.0.0", capabilities = { sampling = {} } }\n'
    )
    (one,) = load_config(config).servers[0].client
    assert (one.name, one.version, one.capabilities, one.view) == (
        "claude-code",
        "2.0.0",
        {"sampling": {}},
        "claude-code",
    )
    config.write_text(server + 'client = [{}, { label = "bare", capabilities = {} }]\n')
    primary, bare = load_config(config).servers[0].client
    assert primary.capabilities == {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}
    assert bare.view == "bare" and bare.name == "claude-code"
    config.write_text(server + 'client = [{}, { version = "9" }]\n')
    assert [p.view for p in load_config(config).servers[0].client] == ["claude-code", "claude-code-2"]
    for text, expected in (
        ('client = { capabilities = { sampling = "yes" } }\n', "client.0.capabilities.sampling"),
        ('client = { nmae = "x" }\n', "client.0.nmae: unknown key"),
    ):
        config.write_text(server + text)
        with pytest.raises(ConfigError) as caught:
            load_config(config)
        assert f"{config}: servers[0] ('a'): " in str(caught.value) and expected in str(caught.value)


def test_client_profiles_over_the_api(store: Store) -> None:
    with web_client(store) as client:
        created = client.post(
            "/api/v1/servers",
            json={
                "name": "remote",
                "url": "https://mcp.example.com/mcp",
                "client": [{"name": "claude-code", "version": "2.0.0", "capabilities": {"sampling": {}}}, {}],
            },
        )
        assert created.status_code == 201, created.text
        profiles = created.json()["client"]
        assert [(p["name"], p["capabilities"]) for p in profiles] == [
            ("claude-code", {"sampling": {}}),
            ("claude-code", {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}),
        ]
        one = client.post(
            "/api/v1/servers", json={"name": "single", "url": "https://mcp.example.com/mcp", "client": {}}
        )
        assert one.status_code == 201 and len(one.json()["client"]) == 1
        bad = client.post(
            "/api/v1/servers",
            json={
                "name": "bad",
                "url": "https://mcp.example.com/mcp",
                "client": {"capabilities": {"sampling": 1}},
            },
        )
        assert bad.status_code == 422
        assert client.get("/api/v1/servers/remote/views").json() == [], "not polled yet"


def test_how_two_views_differ() -> None:
    """The rule alone: which tool, which way, how severe; identical views raise nothing."""
    from monitor.core.fingerprint import CanonicalListing
    from monitor.core.rules.views import views_differ

    base = [
        tool("a", read_only=True),
        tool("b", read_only=False, destructive=False),
        tool("c", description="C."),
        tool("d", annotations={"openWorldHint": False}),
    ]
    other = [
        tool("a", read_only=False),  # the base view is the laxer one
        tool("b", read_only=False, destructive=True),  # the base view is laxer again
        tool("c", description="C, for hosts."),
        tool("d", annotations={"openWorldHint": True}),
        tool("e"),
    ]
    found = {
        f.tool: f
        for f in views_differ("srv", "monitor", CanonicalListing.of(base), "host", CanonicalListing.of(other))
    }
    assert {t: f.severity.value for t, f in found.items()} == {
        "a": "high",
        "b": "high",
        "c": "medium",
        "d": "medium",
        "e": "medium",
    }
    assert "'monitor' with readOnlyHint=true but not to 'host'" in found["a"].message
    assert "'monitor' with destructiveHint=false but not to 'host'" in found["b"].message
    assert found["c"].field is None and "its definition" in found["c"].message
    assert found["d"].field == "annotations.openWorldHint" and (found["d"].old, found["d"].new) == (
        False,
        True,
    )
    assert found["e"].detail["only_in"] == "host" and (found["e"].old, found["e"].new) == (False, True)
    same = CanonicalListing.of(base)
    assert list(views_differ("srv", "x", same, "y", same)) == []
