"""Registering servers over HTTP: never a command to run, and never a host the allow-list forbids.

`[monitor] allowed_server_hosts` (host names, `*.domain` wildcards, IP addresses, CIDR networks)
restricts servers registered over the API; empty (the default), it refuses only link-local, cloud
metadata, "this host", multicast and reserved addresses. It is checked on `POST /servers` and again
at every connect, address by address, so DNS that answers differently later cannot get around it.
Config-file servers are trusted and not checked.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from support import http_server, server_command, tool
from support.web import TOKEN_ENV, web_client

from monitor.collect.client import Limits, PollError, Target, fetch_listing
from monitor.collect.client import http as client_http
from monitor.collect.poller import Poller
from monitor.collect.scheduler import Scheduler
from monitor.collect.targets import limits_for, target_for
from monitor.config import Config, ConfigError, MonitorSettings, ServerConfig, load_config
from monitor.core.hosts import HostPolicy, host_literal
from monitor.service import _poll_now
from monitor.store import Store
from monitor.store.models import Server

TOOLS = [tool("lookup", description="Look up.")]


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("registration") / "tools.json"
    path.write_text(json.dumps(TOOLS), encoding="utf-8")
    with http_server("fastmcp_server.py", str(path)) as url:
        yield url


def make_client(store: Store, allowed: list[str] | None = None, servers: Any = ()) -> TestClient:
    settings = MonitorSettings(api_token_env=TOKEN_ENV, allowed_server_hosts=allowed or [], poll_timeout=5.0)
    config = Config(monitor=settings, servers=list(servers))
    poller = Poller(store, config)
    scheduler = Scheduler(store, poller, config, "registration-test")
    scheduler.register(datetime.now(UTC))
    return web_client(store, config, clock=None, poll_now=_poll_now(poller, scheduler))


def server_count(store: Store) -> int:
    with store.sessions() as session:
        return session.scalar(select(func.count()).select_from(Server)) or 0


# --- stdio ---------------------------------------------------------------------------------------


def test_stdio_servers_cannot_be_registered_over_http(store: Store) -> None:
    """Every way to ask the API for a server that runs a command. Must hold: 422 (or 409 for taking a
    config-file stdio server's name), nothing registered, and no operation that could change an
    existing server's transport or command."""
    command, *args = server_command("hostile_server.py", "legacy-only")
    git = ServerConfig(name="git", transport="stdio", command=command, args=args)
    with make_client(store, servers=[git]) as client:
        before = server_count(store)
        for body in (
            {"name": "x", "transport": "stdio", "command": "/bin/sh"},
            {"name": "x", "transport": "stdio", "url": "https://x.example/"},
            {"name": "x", "transport": "STDIO", "url": "https://x.example/"},
            {"name": "x", "transport": " stdio", "url": "https://x.example/"},
            {"name": "x", "url": "https://x.example/", "command": "/bin/sh"},
            {"name": "x", "url": "https://x.example/", "args": ["-c", "id"]},
            {"name": "x", "url": "https://x.example/", "env": {"LD_PRELOAD": "/tmp/x.so"}},
            {"name": "x", "url": "https://x.example/", "cwd": "/"},
            {"name": "x", "url": "file:///bin/sh"},
            {"name": "x", "url": "stdio:///bin/sh"},
            {"name": "x", "url": "/bin/sh"},
            {"name": "x", "transport": ["stdio"], "url": "https://x.example/"},
        ):
            response = client.post("/api/v1/servers", json=body)
            assert response.status_code == 422, (body, response.status_code, response.text)
        form = client.post("/api/v1/servers", data={"name": "x", "transport": "stdio", "command": "/bin/sh"})
        assert form.status_code == 422
        taken = client.post("/api/v1/servers", json={"name": "git", "url": "http://127.0.0.1:9/mcp"})
        assert taken.status_code == 409
        assert server_count(store) == before
        schema = client.get("/api/v1/openapi.json").json()
        server_item = schema["paths"]["/api/v1/servers/{name}"]
        assert set(server_item) == {"get", "delete"}, "no way to edit a registered server"
        create = schema["components"]["schemas"]["ServerCreate"]
        assert set(create["properties"]) == {
            "name",
            "transport",
            "url",
            "headers",
            "interval_seconds",
            "era",
            "aliases",  # other names hosts know it by: no command either
            "approval",
            "client",  # who the monitor says it is: clientInfo and declared capabilities, no command
        }
        assert create.get("additionalProperties") is False
        assert client.delete("/api/v1/servers/git").status_code == 409
    with store.sessions() as session:
        stored = session.scalars(select(Server).where(Server.name == "git")).one()
        assert (stored.transport, stored.origin, stored.command) == ("stdio", "config", command)


# --- the allow-list at registration ---------------------------------------------------------------


REFUSED_BY_DEFAULT = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.169.254./latest/meta-data/",
    "http://user:pass@169.254.169.254/",
    "http://169.254.0.1:8080/mcp",
    "http://2852039166/",  # 169.254.169.254 as one decimal number
    "http://0xa9fea9fe/",  # ... in hexadecimal
    "http://0xa9.0xfe.0xa9.0xfe/",
    "http://0251.0376.0251.0376/",  # ... in octal
    "http://169.16689662/",  # ... in a.b form
    "http://100.100.100.200/",  # Alibaba Cloud metadata
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.GOOGLE.INTERNAL./",
    "http://metadata/",
    "http://0.0.0.0:8000/mcp",
    "http://0/",
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://[::ffff:169.254.169.254]/",
    "http://[fe80::1]/",
    "http://2130706433/",  # 127.0.0.1, but not written as four decimal numbers
]
ALLOWED_BY_DEFAULT = [
    "http://127.0.0.1:9/mcp",
    "http://10.0.0.7:8080/mcp",
    "https://mcp.example.com/mcp",
    "https://169.254.169.254.example.com/mcp",
]


def test_default_policy_refuses_metadata_and_link_local_in_every_spelling(store: Store) -> None:
    """With no allow-list configured. Must hold: each spelling of a link-local, metadata, "this
    host", multicast or reserved address (decimal, hex, octal, short forms, trailing dot, userinfo,
    IPv4-mapped IPv6, the metadata host names) is refused with 422 and a message that names the host
    and why; ordinary hosts (loopback, private, public names) are accepted."""
    with make_client(store) as client:
        for i, url in enumerate(REFUSED_BY_DEFAULT):
            response = client.post("/api/v1/servers", json={"name": f"bad{i}", "url": url})
            assert response.status_code == 422, (url, response.status_code, response.text)
            detail = response.json()["detail"]
            assert detail.startswith("body.url:"), (url, detail)
            if "[" not in url:  # IPv6 literals are refused by the URL's pattern already
                assert any(word in detail for word in ("link-local", "metadata", "four decimal")), detail
        for i, url in enumerate(ALLOWED_BY_DEFAULT):
            response = client.post("/api/v1/servers", json={"name": f"ok{i}", "url": url})
            assert response.status_code == 201, (url, response.text)
    assert server_count(store) == len(ALLOWED_BY_DEFAULT)


def test_a_configured_allow_list_is_all_the_api_may_register(store: Store) -> None:
    """allowed_server_hosts = 127.0.0.1, *.corp.example, 10.0.0.0/8, 169.254.10.0/24. Must hold:
    exactly the hosts it names (a wildcard covers subdomains only; a host name whose addresses are
    all inside a listed network counts) are accepted; everything else is refused with a message
    naming allowed_server_hosts; a network entry is the only way to unlock a refused range."""
    allowed = ["127.0.0.1", "*.corp.example", "10.0.0.0/8", "169.254.10.0/24"]
    accepted = [
        "http://127.0.0.1:9/mcp",
        "https://mcp.corp.example/mcp",
        "https://a.b.corp.example/mcp",
        "http://10.200.0.1/mcp",
        "http://localhost:9/mcp",  # resolves to 127.0.0.1, which is listed
        "http://169.254.10.20/mcp",
    ]
    refused = [
        "https://corp.example/mcp",
        "https://evilcorp.example/mcp",
        "https://mcp.corp.example.evil.example/mcp",
        "http://127.0.0.2/mcp",
        "http://192.168.1.10/mcp",
        "http://11.0.0.1/mcp",
        "http://169.254.169.254/",
        "https://mcp.example.com/mcp",
    ]
    with make_client(store, allowed) as client:
        for i, url in enumerate(accepted):
            response = client.post("/api/v1/servers", json={"name": f"ok{i}", "url": url})
            assert response.status_code == 201, (url, response.text)
        for i, url in enumerate(refused):
            response = client.post("/api/v1/servers", json={"name": f"bad{i}", "url": url})
            assert response.status_code == 422, (url, response.text)
            detail = response.json()["detail"]
            assert "allowed_server_hosts" in detail or "does not resolve" in detail, (url, detail)
    assert server_count(store) == len(accepted)


def test_the_allow_list_setting_is_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Must hold: each entry is a host name, *.domain, address or CIDR (anything else is a config
    error naming the field); entries are normalised; DRIFT_MONITOR_ALLOWED_SERVER_HOSTS overrides."""
    config = tmp_path / "monitor.toml"
    for bad in ("http://x.example", "*", "a b", "10.0.0.0/33", "*.*.example"):
        config.write_text(f"[monitor]\nallowed_server_hosts = [{json.dumps(bad)}]\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="allowed_server_hosts"):
            load_config(config)
    config.write_text('[monitor]\nallowed_server_hosts = ["MCP.Example.COM.", "10.1.2.3", "10.0.0.0/8"]\n')
    assert load_config(config).monitor.allowed_server_hosts == [
        "mcp.example.com",
        "10.1.2.3/32",
        "10.0.0.0/8",
    ]
    monkeypatch.setenv("DRIFT_MONITOR_ALLOWED_SERVER_HOSTS", '["*.corp.example"]')
    assert load_config(config).monitor.allowed_server_hosts == ["*.corp.example"]


# --- the allow-list at connect time ---------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port on 127.0.0.1 that records whether anyone connected (accept never blocks)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def connected(sock: socket.socket) -> bool:
    try:
        peer, _ = sock.accept()
    except BlockingIOError:
        return False
    peer.close()
    return True


def test_a_registered_server_is_checked_again_at_every_connect(store: Store, listener: socket.socket) -> None:
    """A server registered while its host was allowed, polled through POST /servers/{name}/poll
    after the allow-list changed (a restart with a narrower list). Must hold: the poll is one
    recorded `connect` error naming the host and allowed_server_hosts, and no connection was made."""
    port = listener.getsockname()[1]
    with make_client(store, ["127.0.0.1"]) as client:
        created = client.post(
            "/api/v1/servers", json={"name": "moved", "url": f"http://localhost:{port}/mcp"}
        )
        assert created.status_code == 201, created.text
    with make_client(store, ["10.0.0.0/8"]) as client:
        polled = client.post("/api/v1/servers/moved/poll").json()
    assert polled["ok"] is False and polled["error_kind"] == "connect", polled
    assert polled["error"] == "refused to connect: localhost (127.0.0.1) is not in allowed_server_hosts"
    assert not connected(listener), "the refused host was contacted"
    with store.sessions() as session:
        server = session.scalars(select(Server).where(Server.name == "moved")).one()
    assert server.last_error == f"connect: {polled['error']}"


@pytest.mark.parametrize(
    "answers",
    [["169.254.169.254"], ["127.0.0.1", "169.254.169.254"], ["::ffff:169.254.169.254"], ["fd00:ec2::254"]],
)
async def test_dns_that_answers_a_metadata_address_at_connect_time_is_refused(
    answers: list[str], monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> None:
    """DNS rebinding: a name that passed registration (a wildcard entry needs no lookup) resolves,
    when the poller connects, to a metadata address, alone or among good ones. Must hold: the poll
    is refused before any connection, naming the address; the poller connects only to addresses it
    checked (so the same name answering a good address is polled at exactly that address)."""
    port = listener.getsockname()[1]
    target = Target(name="rebind", transport="http", url=f"http://svc.rebind.test:{port}/mcp", origin="api")
    policy = ("*.rebind.test", "127.0.0.1")
    assert HostPolicy(policy).url_refusal(target.url or "") is None, "registration would accept it"

    async def resolve(host: str, _port: int) -> list[Any]:
        assert host == "svc.rebind.test"
        return [host_literal(answer) for answer in answers]

    monkeypatch.setattr(client_http, "resolve", resolve)
    with pytest.raises(PollError) as refused:
        await fetch_listing(target, Limits(timeout=5.0, allowed_hosts=policy))
    assert refused.value.kind == "connect"
    assert "link-local, cloud metadata or reserved address" in refused.value.message, refused.value.message
    assert not connected(listener)


async def test_a_name_is_polled_at_the_address_that_was_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same fake DNS answering a good address. Must hold: the poll succeeds against that very
    address (the URL's host name is only the name: it was never resolved again by the transport).
    (The SDK's own server refuses a Host it does not know, so a hand-written one answers here.)"""

    async def resolve(host: str, _port: int) -> list[Any]:
        return [host_literal("127.0.0.1")]

    monkeypatch.setattr(client_http, "resolve", resolve)
    with http_server("hostile_server.py", "legacy-only") as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        target = Target(
            name="pinned", transport="http", url=f"http://mcp.pinned.test:{port}/mcp", origin="api"
        )
        listing = await fetch_listing(target, Limits(timeout=10.0, allowed_hosts=("*.pinned.test",)))
    assert [tool["name"] for tool in listing.tools] == ["echo", "add"]


async def test_config_file_servers_are_not_restricted(tools_server: str) -> None:
    """A config-file server on 127.0.0.1 while the allow-list names only 10.0.0.0/8. Must hold: it is
    polled (the operator who wrote the file is trusted), while the same URL as an API target is not."""
    config = Config(
        monitor=MonitorSettings(allowed_server_hosts=["10.0.0.0/8"]),
        servers=[ServerConfig(name="local", transport="http", url=tools_server)],
    )
    limits = limits_for(config.monitor)
    trusted = target_for(config, config.servers[0])
    assert trusted.origin == "config"
    assert (await fetch_listing(trusted, limits)).tools == TOOLS
    with pytest.raises(PollError, match="not in allowed_server_hosts"):
        await fetch_listing(Target(name="local", transport="http", url=tools_server), limits)
