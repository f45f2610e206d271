"""Cloaking defence (issue 24, item 2): the monitor polls as a mainstream host (clientInfo and HTTP
User-Agent), each profile may set its own headers, and the monitor's own identity is polled now and
then beside them, so a server that tells the monitor from hosts raises `listing-varies-by-client` high.

Real servers (tests/servers/fastmcp_server.py) over stdio and Streamable HTTP on 127.0.0.1; real
databases.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from support import tool
from support.servers import SERVERS, http_server
from support.web import web_client

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.clients import HOST_VERSION
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert, ClientView

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

TOOLS = [
    tool("list_notes", read_only=True, description="List notes."),
    tool("purge_notes", read_only=False, destructive=True, description="Delete every note."),
]
EVERY_POLL = 1e-6
"""An `identity_check_interval` that makes every poll after a poller's first one poll as the monitor too."""


def polls(store: Store, server: ServerConfig, times: int, *, identity_every: float = 0) -> list[PollOutcome]:
    settings = MonitorSettings(poll_timeout=20, identity_check_interval=identity_every)
    poller = Poller(store, Config(monitor=settings, servers=[server], source="test"))
    outcomes = []
    try:
        for _ in range(times):
            (outcome,) = asyncio.run(poller.poll(poller.jobs()))
            assert outcome.ok, outcome.error
            assert outcome.view_errors == {}
            outcomes.append(outcome)
    finally:
        poller.close()
    return outcomes


def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


def stdio_server(tmp_path: Path, *args: str, client: Any = None) -> ServerConfig:
    config: dict[str, Any] = {
        "name": "notes",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SERVERS / "fastmcp_server.py"), str(tools_file(tmp_path)), *args],
    }
    if client is not None:
        config["client"] = client
    return ServerConfig.model_validate(config)


def current_tools(store: Store) -> dict[str, Any]:
    with web_client(store) as client:
        newest = client.get("/api/v1/servers/notes/snapshots").json()["items"][0]["version"]
        version = client.get(f"/api/v1/servers/notes/snapshots/{newest}").json()
    return {t["name"]: t for t in version["tools"]}


def test_the_monitor_polls_as_a_mainstream_host(store: Store, tmp_path: Path) -> None:
    """Must hold: by default the server sees Claude Code's clientInfo and User-Agent (never an HTTP
    library's), a profile's own headers replace the default User-Agent and add to the server's
    headers, and every request of a profile carries the server's headers."""
    seen = tmp_path / "seen.jsonl"
    profiles = [
        {},
        {
            "name": "Visual Studio Code",
            "version": "1.105.1",
            "label": "vscode",
            "headers": {"User-Agent": "node", "X-Host": "vscode"},
        },
    ]
    with http_server("fastmcp_server.py", str(tools_file(tmp_path)), "--record-clients", str(seen)) as url:
        server = ServerConfig.model_validate(
            {
                "name": "notes",
                "transport": "http",
                "url": url,
                "headers": {"X-Team": "blue"},
                "client": profiles,
            }
        )
        polls(store, server, 1)
    asked = {line["name"]: line["headers"] for line in map(json.loads, seen.read_text().splitlines())}
    assert set(asked) == {"claude-code", "Visual Studio Code"}
    assert asked["claude-code"]["user-agent"] == f"claude-code/{HOST_VERSION} (cli)"
    assert asked["Visual Studio Code"]["user-agent"] == "node"
    assert asked["Visual Studio Code"]["x-host"] == "vscode" and "x-host" not in asked["claude-code"]
    assert asked["claude-code"]["x-team"] == asked["Visual Studio Code"]["x-team"] == "blue"


def test_cloaking_by_client_name_is_caught_by_the_own_identity(store: Store, tmp_path: Path) -> None:
    """The server marks every tool read-only, not destructive, for a client named drift-monitor. Must
    hold: the stored version is what hosts get (purge_notes writable); once the monitor's own identity
    is polled, a high `listing-varies-by-client` names purge_notes and both views; a later poll that
    sees the same difference records it again nowhere; both listings are kept as views."""
    store.hooks.append(Alerting(base_url="http://127.0.0.1:8000"))
    polled = polls(store, stdio_server(tmp_path, "--vary-by-client", "cloak"), 3, identity_every=EVERY_POLL)
    assert current_tools(store)["purge_notes"]["annotations"]["readOnlyHint"] is False
    assert polled[0].findings == [], "the own identity is first polled one interval after the first poll"
    varies = {f.tool: f for f in polled[1].findings if f.rule == "listing-varies-by-client"}
    assert set(varies) == {"list_notes", "purge_notes"}
    assert all(f.severity == "high" for f in varies.values())
    cloaked = varies["purge_notes"]
    assert cloaked.detail["views"] == ["claude-code", "drift-monitor"]
    assert "'drift-monitor' with readOnlyHint=true" in cloaked.message
    assert polled[2].findings == [], "a difference that lasts is recorded once"
    with store.sessions() as session:
        views = {row.profile: row.client["name"] for row in session.scalars(select(ClientView))}
    assert views == {"claude-code": "claude-code", "drift-monitor": "drift-monitor"}
    with web_client(store) as client:
        server_page = client.get("/servers/notes")
        assert "/servers/notes/views/diff?view=drift-monitor" in server_page.text
        page = client.get("/servers/notes/views/diff", params={"view": "drift-monitor"})
        assert page.status_code == 200, page.text
        assert "claude-code/" in page.text and "drift-monitor/" in page.text, "both clients named"
        assert "with readOnlyHint=true but not to" in page.text and "purge_notes" in page.text
        assert "Delete every note." in page.text
        missing = client.get("/servers/notes/views/diff", params={"view": "nobody"})
        assert missing.status_code == 404
        alerts = client.get("/api/v1/alerts", params={"rule": "listing-varies-by-client"}).json()["items"]
        alert_page = client.get(f"/alerts/{alerts[0]['id']}")
        assert "/views/diff?base=claude-code&amp;view=drift-monitor" in alert_page.text, (
            "both listings linked"
        )


def test_cloaking_by_user_agent(store: Store, tmp_path: Path) -> None:
    """The server shows the safe listing to any HTTP request whose User-Agent is an HTTP library's or
    the monitor's. Must hold: the version stored is the one a host gets, and the own identity's poll
    raises the difference, high."""
    with http_server(
        "fastmcp_server.py", str(tools_file(tmp_path)), "--vary-by-client", "cloak-agent"
    ) as url:
        server = ServerConfig.model_validate({"name": "notes", "transport": "http", "url": url})
        polled = polls(store, server, 2, identity_every=EVERY_POLL)
    assert current_tools(store)["purge_notes"]["annotations"]["readOnlyHint"] is False
    varies = {f.tool: f for f in polled[1].findings if f.rule == "listing-varies-by-client"}
    assert varies["purge_notes"].severity == "high"
    assert varies["purge_notes"].detail["annotations"]["readOnlyHint"] == {
        "claude-code": False,
        "drift-monitor": True,
    }


def test_a_cloaking_alert_resolves_only_when_the_own_identity_sees_the_same(
    store: Store, tmp_path: Path
) -> None:
    """The server shows drift-monitor a safe listing; a bare profile is polled beside the primary one.
    Must hold: a poll without the own identity (not due) compares only the other views, so even when
    they change and agree it resolves no `listing-varies-by-client` alert the own identity raised; the
    next poll with it, seeing what hosts see, does."""
    store.hooks.append(Alerting(base_url="http://127.0.0.1:8000"))
    bare = {"label": "bare", "name": "bare-host", "capabilities": {}}

    def open_alerts() -> set[str | None]:
        with store.sessions() as session:
            rows = session.scalars(select(Alert).where(Alert.rule == "listing-varies-by-client"))
            return {alert.tool for alert in rows if alert.state == "open"}

    cloaking = stdio_server(tmp_path, "--vary-by-client", "cloak", client=[{}, bare])
    polls(store, cloaking, 2, identity_every=EVERY_POLL)
    assert open_alerts() == {"list_notes", "purge_notes"}
    edited = [{**TOOLS[0], "description": "List every note."}, TOOLS[1]]
    (tmp_path / "tools.json").write_text(json.dumps(edited))  # every view changes, the two polled agree
    (changed,) = polls(store, cloaking, 1, identity_every=EVERY_POLL)  # a poller's first poll: not due
    assert changed.new_version
    assert open_alerts() == {"list_notes", "purge_notes"}
    honest = stdio_server(tmp_path, client=[{}, bare])
    (tmp_path / "tools.json").write_text(json.dumps(edited))
    polls(store, honest, 2, identity_every=EVERY_POLL)
    assert open_alerts() == set()
