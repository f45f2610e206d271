"""`_meta` per server and per version (issue 24, item 3): kept with each server's version, not with
the shared content-addressed listing; its changes recorded (`meta-changed`, high where hosts render
it); a `_meta` that changes with every request is no reason to fail a paged poll.

Real servers (tests/servers/fastmcp_server.py) over stdio; real databases.
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
from support.servers import SERVERS
from support.web import web_client

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.rules.metas import meta_changes
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

APP = {"ui": {"resourceUri": "ui://notes/list.html"}, "build": "a1"}


def server(tmp_path: Path, name: str, tools: list[dict[str, Any]], *args: str) -> ServerConfig:
    tools_file = tmp_path / f"{name}.json"
    tools_file.write_text(json.dumps(tools))
    return ServerConfig.model_validate(
        {
            "name": name,
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVERS / "fastmcp_server.py"), str(tools_file), *args],
        }
    )


def poll(store: Store, *servers: ServerConfig) -> list[PollOutcome]:
    config = Config(monitor=MonitorSettings(poll_timeout=20), servers=list(servers), source="test")
    poller = Poller(store, config)
    try:
        outcomes = asyncio.run(poller.poll(poller.jobs()))
    finally:
        poller.close()
    for outcome in outcomes:
        assert outcome.ok, outcome.error
    return outcomes


def served(store: Store, name: str) -> dict[str, Any]:
    """The server's newest version's tools, by name, as the API gives them."""
    with web_client(store) as client:
        newest = client.get(f"/api/v1/servers/{name}/snapshots").json()["items"][0]["version"]
        version = client.get(f"/api/v1/servers/{name}/snapshots/{newest}").json()
    return {t["name"]: t for t in version["tools"]}


def test_meta_is_kept_per_server(store: Store, tmp_path: Path) -> None:
    """Two servers serve the same tools, one with `_meta`, one without (one content-addressed listing).
    Must hold: each server's version shows its own `_meta`: none for the one that sent none."""
    plain = [tool("list_notes", read_only=True, description="List notes.")]
    with_meta = [{**plain[0], "_meta": APP}]
    poll(store, server(tmp_path, "apps", with_meta))
    poll(store, server(tmp_path, "plain", plain))
    assert served(store, "apps")["list_notes"]["_meta"] == APP
    assert "_meta" not in served(store, "plain")["list_notes"], "server B never shows server A's _meta"


def test_meta_changes_are_recorded(store: Store, tmp_path: Path) -> None:
    """Must hold: a `_meta` change is no new version; it is kept with the version and recorded as an
    info `meta-changed`; a change of `_meta.ui` (what MCP Apps hosts render) is high, with an alert."""
    store.hooks.append(Alerting(base_url="http://127.0.0.1:8000"))
    tools = [{**tool("list_notes", read_only=True), "_meta": APP}]
    poll(store, server(tmp_path, "apps", tools))
    tools[0]["_meta"] = {**APP, "build": "b2"}
    (build,) = poll(store, server(tmp_path, "apps", tools))
    assert not build.new_version
    assert [(f.rule, f.severity, f.tool, f.field) for f in build.findings] == [
        ("meta-changed", "info", "list_notes", "_meta")
    ]
    assert build.findings[0].detail == {"keys": ["build"]}
    assert served(store, "apps")["list_notes"]["_meta"]["build"] == "b2", "kept as last sent"
    tools[0]["_meta"] = {**APP, "ui": {"resourceUri": "ui://elsewhere/phish.html"}}
    (swap,) = poll(store, server(tmp_path, "apps", tools))
    (changed,) = swap.findings
    assert (changed.rule, changed.severity, changed.field) == ("meta-changed", "high", "_meta.ui")
    assert changed.new == {"resourceUri": "ui://elsewhere/phish.html"}
    (again,) = poll(store, server(tmp_path, "apps", tools))
    assert again.findings == [], "unchanged _meta raises nothing again"
    with store.sessions() as session:
        alert = session.scalars(select(Alert)).one()
    assert (alert.rule, alert.tool, alert.severity) == ("meta-changed", "list_notes", "high")


def test_volatile_meta_on_pages_is_no_reason_to_fail(store: Store, tmp_path: Path) -> None:
    """The server stamps every tool of every page with a new `_meta.requestId`, over two pages. Must
    hold: the poll succeeds (the first page asked again differs only in `_meta`), one version."""
    tools = [tool("a", read_only=True), tool("b", read_only=True)]
    volatile = server(tmp_path, "stamps", tools, "--page-size", "1", "--volatile-meta")
    (first,) = poll(store, volatile)
    (second,) = poll(store, volatile)
    assert first.version == second.version == 1 and not second.new_version


def test_which_meta_keys_hosts_render() -> None:
    """The rule alone: `ui`, `ui/resourceUri` and `openai/...` keys are high, others info; a tool
    whose `_meta` is the same raises nothing; a `_meta` that is no object still compares."""
    old = {"a": {"ui": 1, "x": 1}, "b": {"openai/outputTemplate": "t1"}, "c": {"x": 1}, "d": "text", "e": {}}
    new = {"a": {"ui": 2, "x": 1}, "b": {"openai/outputTemplate": "t2"}, "c": {"x": 2}, "d": "other", "e": {}}
    found = {f.tool: f for f in meta_changes("srv", old, new, ["a", "b", "c", "d", "e"])}
    assert {name: (f.severity.value, f.field) for name, f in found.items()} == {
        "a": ("high", "_meta.ui"),
        "b": ("high", "_meta.openai/outputTemplate"),
        "c": ("info", "_meta"),
        "d": ("info", "_meta"),
    }
