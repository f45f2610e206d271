"""Negotiation as the MCP lifecycle has it (2025-11-25 handshake and 2026-07-28 discover).

- A server that declares no `tools` capability is not asked for tools: its poll succeeds with
  an empty listing and the server's state is `no tools` (it used to fail every poll asking).
- What the monitor declares (roots, sampling, elicitation) it answers as a host that says no:
  `{"roots": []}`, elicitation declined, sampling refused with -1 (it used to answer -32600).
- Every capability the SDK's `ClientCapabilities` accepts, `tasks` included, is accepted by the
  config file and the API alike, and what it refuses both refuse.

Real servers (tests/servers/hostile_server.py over stdio), real databases.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from pydantic import ValidationError
from sqlalchemy import select
from support import server_command
from support.polls import poll_once
from support.web import web_client

from monitor.collect.client import Target, fetch_listing
from monitor.collect.poller import Poller
from monitor.config import Config, ConfigError, MonitorSettings, ServerConfig, load_config
from monitor.store import Store
from monitor.store.models import PollAttempt, Snapshot


@pytest.mark.parametrize("era", ["handshake", "modern"])
def test_a_server_without_the_tools_capability_is_not_asked_and_is_no_failure(store: Store, era: Any) -> None:
    command, *args = server_command("hostile_server.py", "no-tools")
    server = ServerConfig(name="prompts-only", transport="stdio", command=command, args=args, era=era)
    outcome = poll_once(Poller(store, Config(monitor=MonitorSettings(poll_timeout=20), servers=[server])))
    assert outcome.ok, outcome.error
    with store.sessions() as session:
        attempt = session.scalars(select(PollAttempt)).one()
        assert (attempt.ok, attempt.pages) == (True, 0)
        assert len(session.scalars(select(Snapshot)).all()) == 1
    with web_client(store) as client:
        record = client.get("/api/v1/servers/prompts-only").json()
    assert record["status"] == "no tools"
    assert record["current"]["tool_count"] == 0
    assert "tools" not in record["capabilities"]


def test_what_the_monitor_declares_it_answers_as_a_host_that_says_no() -> None:
    command, *args = server_command("hostile_server.py", "asks-client")
    target = Target(name="asker", transport="stdio", command=command, args=args)
    listing = asyncio.run(fetch_listing(target))
    answers = {tool["name"]: json.loads(tool["description"]) for tool in listing.tools}
    assert answers == {
        "roots": {"result": {"roots": []}},
        "sampling": {"error": {"code": -1, "message": "User rejected sampling request"}},
        "elicitation": {"result": {"action": "decline"}},
    }


def test_what_a_profile_does_not_declare_keeps_the_sdk_refusal() -> None:
    from monitor.core.clients import ClientProfile

    command, *args = server_command("hostile_server.py", "asks-client")
    bare = ClientProfile(name="bare-host", version="1.0", capabilities={})
    listing = asyncio.run(
        fetch_listing(Target(name="asker", transport="stdio", command=command, args=args, client=bare))
    )
    errors = {tool["name"]: json.loads(tool["description"])["error"]["code"] for tool in listing.tools}
    assert errors == {"roots": -32600, "sampling": -32600, "elicitation": -32600}


TASKS = {
    "list": {},
    "cancel": {},
    "requests": {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}},
}
CAPABILITIES: list[dict[str, Any]] = [
    {"tasks": TASKS},
    {
        "roots": {"listChanged": True},
        "sampling": {"tools": {}, "context": {}},
        "elicitation": {"form": {}, "url": {}},
    },
    {"experimental": {"vendor.feature": {"level": 3, "modes": ["a", "b"]}}},
    {"extensions": {"io.example/ext": {"setting": {"deep": {"deeper": True}}}}},
    {"roots": {"listChanged": "maybe"}},
    {"sampling": 1},
    {"elicitation": {"form": []}},
]


def sdk_accepts(capabilities: dict[str, Any]) -> bool:
    try:
        types.ClientCapabilities.model_validate(capabilities)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("capabilities", CAPABILITIES, ids=[json.dumps(c)[:40] for c in CAPABILITIES])
def test_config_and_api_accept_exactly_what_the_sdk_accepts(
    store: Store, tmp_path: Path, capabilities: dict[str, Any]
) -> None:
    expected = sdk_accepts(capabilities)
    config = tmp_path / "monitor.toml"
    config.write_text(
        '[[servers]]\nname = "a"\ntransport = "http"\nurl = "http://127.0.0.1:9/mcp"\n'
        f"[[servers.client]]\ncapabilities = {toml_inline(capabilities)}\n",
        encoding="utf-8",
    )
    try:
        (profile,) = load_config(config).servers[0].client
        in_config = profile.capabilities == capabilities
    except ConfigError:
        in_config = False
    with web_client(store) as client:
        created = client.post(
            "/api/v1/servers",
            json={
                "name": "remote",
                "url": "https://mcp.example.com/mcp",
                "client": {"capabilities": capabilities},
            },
        )
    over_api = created.status_code == 201
    assert (in_config, over_api) == (expected, expected), created.text
    if over_api:
        assert created.json()["client"][0]["capabilities"] == capabilities


def toml_inline(value: Any) -> str:
    """`value` as a TOML inline value (tables, arrays, strings, numbers, booleans)."""
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(key)} = {toml_inline(item)}" for key, item in value.items()) + " }"
        )
    if isinstance(value, list):
        return "[" + ", ".join(toml_inline(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)
