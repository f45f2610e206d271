"""Every client view is judged (issue 24, item 1): tool rules, approvals and decisions run on each
client profile's listing, not only on the primary one's.

A real server over stdio (tests/servers/fastmcp_server.py) lists a tool only to clients declaring
sampling (`--sampling-tools`), or shows the monitor a safer listing than other hosts (`cloak`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from support import tool
from support.servers import SERVERS
from support.web import web_client

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.clients import HOST_CAPABILITIES
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

BARE = {"label": "bare", "name": "bare-host", "version": "1.0", "capabilities": {}}
HOST: dict[str, Any] = {}
"""The default profile: declares roots, sampling and elicitation, as common hosts do."""
CLAUDE = {"name": "claude-code", "version": "2.0.0"}


def server(tmp_path: Path, profiles: list[dict[str, Any]], *extra: str) -> ServerConfig:
    tools_file = tmp_path / "tools.json"
    if not tools_file.exists():
        tools_file.write_text(json.dumps([tool("list_notes", read_only=True, description="List notes.")]))
    return ServerConfig.model_validate(
        {
            "name": "notes",
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVERS / "fastmcp_server.py"), str(tools_file), *extra],
            "client": profiles,
        }
    )


def host_only_server(tmp_path: Path, profiles: list[dict[str, Any]], read_only: bool) -> ServerConfig:
    """A server listing `send_summary` only to clients that declare sampling."""
    host_tools = tmp_path / "sampling-tools.json"
    host_tools.write_text(json.dumps([tool("send_summary", read_only=read_only, description="Summarise.")]))
    return server(tmp_path, profiles, "--sampling-tools", str(host_tools))


def poll(store: Store, config: ServerConfig) -> PollOutcome:
    poller = Poller(store, Config(monitor=MonitorSettings(poll_timeout=20), servers=[config], source="test"))
    try:
        (outcome,) = asyncio.run(poller.poll(poller.jobs()))
    finally:
        poller.close()
    assert outcome.ok, outcome.error
    assert outcome.view_errors == {}
    return outcome


@pytest.mark.parametrize("order", ["bare first", "host first"])
def test_a_tool_only_hosts_see_losing_read_only_is_critical(store: Store, tmp_path: Path, order: str) -> None:
    """Must hold: whatever the profile order, a tool only capability-declaring clients see that turns
    from read-only to writable raises one critical `read-only-revoked` naming the view, and an alert."""
    store.hooks.append(Alerting(base_url="http://127.0.0.1:8000"))
    profiles = [BARE, HOST] if order == "bare first" else [HOST, BARE]
    poll(store, host_only_server(tmp_path, profiles, read_only=True))
    outcome = poll(store, host_only_server(tmp_path, profiles, read_only=False))
    (revoked,) = [f for f in outcome.findings if f.rule == "read-only-revoked"]
    assert revoked.tool == "send_summary" and revoked.severity == "critical"
    if order == "bare first":
        assert revoked.detail["view"] == "claude-code" and "'claude-code'" in revoked.message
    with store.sessions() as session:
        alert = session.scalars(select(Alert).where(Alert.rule == "read-only-revoked")).one()
        assert alert.tool == "send_summary" and alert.severity == "critical" and alert.state == "open"


def decide(web: Any, tool_name: str, capabilities: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    body = {"server": "notes", "tool": tool_name, **fields}
    if capabilities is not None:
        body["client_capabilities"] = capabilities
    answer = web.post("/api/v1/decisions", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_decisions_are_judged_on_the_host_view(store: Store, tmp_path: Path) -> None:
    """Must hold: a tool only hosts see is trusted on first use as that view first listed it; a host that
    declares sampling is answered from its view, a bare one is told the tool is not listed to it, and one
    that says nothing gets the strictest view's answer; once the tool turns writable, every host that may
    hold it is denied."""
    profiles = [BARE, HOST]
    poll(store, host_only_server(tmp_path, profiles, read_only=True))
    with web_client(store) as client:
        host = decide(client, "send_summary", HOST_CAPABILITIES)
        assert host["decision"] == "allow", host
        assert decide(client, "send_summary", None)["decision"] == "allow"
        bare = decide(client, "send_summary", {})
        assert (bare["decision"], bare["reasons"]) == ("deny", ["unknown-tool"])
        views = client.get("/api/v1/servers/notes/views").json()
        full = next(v["fingerprint"] for v in views if v["profile"] == "claude-code")
        held = decide(client, "send_summary", HOST_CAPABILITIES, fingerprint=full)
        assert held["reasons"] == ["approved"], "the host view's listing is current, not stale"
        enforced = client.get("/api/v1/servers/notes/annotations/enforced").json()
        assert set(enforced["tools"]) == {"list_notes", "send_summary"}
        # The same process: its decision cache must see that only a view changed.
        poll(store, host_only_server(tmp_path, profiles, read_only=False))
        for capabilities in (HOST_CAPABILITIES, None):
            answer = decide(client, "send_summary", capabilities)
            assert answer["decision"] == "deny" and answer["rule"] == "read-only-revoked", answer
        assert decide(client, "list_notes", {})["decision"] == "allow"


def test_a_cloaking_server_is_denied_unless_the_host_view_is_known(store: Store, tmp_path: Path) -> None:
    """The server shows `purge_notes` read-only to a client named drift-monitor (the primary view)
    and writable to Claude Code. Must hold: a host that says nothing gets the strictest view's answer
    (deny); Claude Code (same capabilities, its own name) is judged on its own view (deny), the monitor's
    own identity on its (allow)."""
    notes = tmp_path / "tools.json"
    notes.write_text(
        json.dumps([tool("purge_notes", read_only=False, destructive=True, description="Delete notes.")])
    )
    poll(store, server(tmp_path, [{"name": "drift-monitor"}, CLAUDE], "--vary-by-client", "cloak"))
    with web_client(store) as client:
        assert decide(client, "purge_notes", None)["decision"] == "deny"
        claude = decide(client, "purge_notes", HOST_CAPABILITIES, client="claude-code/2.0.0")
        assert claude["decision"] == "deny" and claude["rule"] == "read-only-revoked", claude
        monitor = decide(client, "purge_notes", HOST_CAPABILITIES, client="drift-monitor/1")
        assert monitor["decision"] == "allow", "the view the server calls safe is as first trusted"


EVERYTHING = os.environ.get("DRIFT_MONITOR_TEST_EVERYTHING") or shutil.which("mcp-server-everything")
"""`@modelcontextprotocol/server-everything`'s binary (`npm install` it, and put it on PATH or name it
in DRIFT_MONITOR_TEST_EVERYTHING); the test is skipped without it."""


@pytest.mark.skipif(EVERYTHING is None, reason="server-everything is not installed")
def test_server_everything_every_profile_judged(store: Store) -> None:
    """The real server-everything lists fewer tools to a bare client than to hosts. Must hold: with
    the bare profile first, each view is stored, and the tools only hosts see are decided on the
    host's view (allowed, as first trusted), unknown to a bare host (deny), and allowed on the
    strictest view when the host does not say what it declared."""
    assert EVERYTHING is not None
    config = ServerConfig.model_validate(
        {
            "name": "notes",
            "transport": "stdio",
            "command": EVERYTHING,
            "args": ["stdio"],
            "client": [BARE, HOST],
        }
    )
    poll(store, config)
    with web_client(store) as client:
        views = {v["profile"]: v["tool_count"] for v in client.get("/api/v1/servers/notes/views").json()}
        assert views["bare"] < views["claude-code"], views
        for name in ("trigger-sampling-request", "get-roots-list"):
            assert decide(client, name, HOST_CAPABILITIES)["decision"] == "allow"
            assert decide(client, name, {})["reasons"] == ["unknown-tool"]
            assert decide(client, name, None)["decision"] == "allow"
