"""`drift-monitor import-registry` with MCP Registry server.json files and a loopback registry's pages."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from support import http_server, tool
from support.registry import OFFICIAL, Registry

from monitor.cli import main
from monitor.config import load_config
from monitor.store.models import Server

SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-09-29/server.schema.json"


def server_json(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "$schema": SCHEMA,
        "name": name,
        "description": "A test server.",
        "version": "1.0.2",
        "remotes": [{"type": "streamable-http", "url": url}],
        **extra,
    }


WEATHER = server_json(
    "io.github.example/weather",
    "https://weather.example.com/mcp",
    remotes=[
        {
            "type": "streamable-http",
            "url": "https://weather.example.com/{tenant}/mcp",
            "headers": [
                {"name": "Authorization", "value": "Bearer {api_key}", "isSecret": True, "isRequired": True},
                {"name": "X-Region", "description": "optional", "isRequired": False},
            ],
        },
        {"type": "sse", "url": "https://weather.example.com/sse"},
    ],
    packages=[
        {
            "registryType": "npm",
            "identifier": "@example/weather-mcp",
            "version": "1.0.2",
            "transport": {"type": "stdio"},
            "environmentVariables": [{"name": "WEATHER_API_KEY", "isSecret": True, "isRequired": True}],
        }
    ],
)


@pytest.fixture
def config(tmp_path: Path, database_url: str, engine: Engine) -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(
        f'[monitor]\ndatabase_url = "{database_url}"\n'
        'allowed_server_hosts = ["127.0.0.1", "*.example.com"]\n',
        encoding="utf-8",
    )
    return path


def servers(engine: Engine) -> dict[str, tuple[str, str | None, Any, str]]:
    with Session(engine) as session:
        return {s.name: (s.transport, s.url, s.headers, s.origin) for s in session.scalars(select(Server))}


def test_server_json_file(
    tmp_path: Path,
    config: Path,
    engine: Engine,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "server.json"
    source.write_text(json.dumps(WEATHER), encoding="utf-8")
    monkeypatch.delenv("API_KEY", raising=False)
    assert main(["import-registry", str(source), "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "io.github.example-weather-1: skipped: set API_KEY, TENANT" in out
    assert "io.github.example-weather-2: registered (sse https://weather.example.com/sse)" in out
    package = tomllib.loads(out.split("review, then add to the config file if wanted")[1])
    assert package["servers"] == [
        {
            "name": "io.github.example-weather-npm",
            "transport": "stdio",
            "command": "npx",
            "args": ["-y", "@example/weather-mcp@1.0.2"],
            "env": {"WEATHER_API_KEY": "${WEATHER_API_KEY}"},
        }
    ]
    assert "io.github.example-weather-npm" not in servers(engine), "packages are never registered"

    monkeypatch.setenv("API_KEY", "k-secret")
    monkeypatch.setenv("TENANT", "acme")
    assert main(["import-registry", str(source), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "io.github.example-weather-2: already registered" in out
    assert servers(engine)["io.github.example-weather-1"] == (
        "http",
        "https://weather.example.com/acme/mcp",
        {"Authorization": "Bearer k-secret"},  # the optional, valueless X-Region is left out
        "api",
    )
    assert "k-secret" not in out


def test_toml_output_for_the_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "server.json"
    source.write_text(json.dumps({"server": WEATHER, "_meta": {}}), encoding="utf-8")
    assert main(["import-registry", str(source), "--toml"]) == 0
    text = capsys.readouterr().out
    (tmp_path / "servers.toml").write_text(text, encoding="utf-8")
    imported = load_config(tmp_path / "servers.toml")
    first = imported.server("io.github.example-weather-1")
    assert first.url == "https://weather.example.com/${TENANT}/mcp"
    assert first.headers == {"Authorization": "Bearer ${API_KEY}"}
    assert [s.name for s in imported.servers] == [
        "io.github.example-weather-1",
        "io.github.example-weather-2",
        "io.github.example-weather-npm",
    ]


def test_registry_pages_from_a_loopback_registry(
    config: Path, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [server_json(f"io.github.team/server-{i}", f"http://127.0.0.1:9/mcp/{i}") for i in range(5)]
    entries.append(server_json("com.example/metadata", "http://169.254.169.254/latest"))
    entries.append({"name": "broken", "description": "no remotes, no packages"})
    with Registry(entries, page_size=2) as registry:
        assert main(["import-registry", registry.url, "--config", str(config)]) == 1
    assert registry.requests == [
        "/v0.1/servers",
        "/v0.1/servers?cursor=2",
        "/v0.1/servers?cursor=4",
        "/v0.1/servers?cursor=6",
    ]
    captured = capsys.readouterr()
    assert "com.example-metadata: skipped: refused by allowed_server_hosts" in captured.out
    assert "drift-monitor: broken: skipped: has neither remotes nor packages" in captured.err
    registered = servers(engine)
    assert sorted(registered) == [f"io.github.team-server-{i}" for i in range(5)]
    assert registered["io.github.team-server-3"] == ("http", "http://127.0.0.1:9/mcp/3", None, "api")


def test_registry_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    assert main(["import-registry", str(tmp_path / "bad.json")]) == 2
    assert capsys.readouterr().err.startswith("drift-monitor: ")
    with Registry([]) as registry:
        assert main(["import-registry", registry.url.replace("/v0.1/servers", "/nothing"), "--toml"]) == 2
    assert "HTTP 404" in capsys.readouterr().err


REGISTRY_EXAMPLES = Path(__file__).resolve().parent / "data" / "registry"
"""Examples from the MCP Registry's own server.json reference: `with-remote.json` and
`with-package.json` (its valid examples, current schema) and `filesystem.json` (the filesystem
server of its format specification, in the earlier snake_case schema), as published."""


def toml_of(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["import-registry", *argv, "--toml"]) == 0
    return {server["name"]: server for server in tomllib.loads(capsys.readouterr().out)["servers"]}


def test_the_registrys_own_examples(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST", "devbox.local")  # what a shell has: never taken for the registry's {host}
    remote = toml_of(capsys, str(REGISTRY_EXAMPLES / "with-remote.json"))
    assert remote["io.github.user-remote-weather"]["url"] == "https://api.example.com/mcp", "its default"
    assert remote["io.github.user-remote-weather"]["headers"] == {"Authorization": "${AUTHORIZATION}"}

    package = toml_of(capsys, str(REGISTRY_EXAMPLES / "with-package.json"))[
        "io.github.user-local-weather-npm"
    ]
    assert package["command"] == "npx"
    assert package["args"] == [
        "-y",
        "@modelcontextprotocol/server-weather@1.0.0",
        "${CONFIG_PATH}",
        "--port",
        "8080",
    ]
    assert package["env"] == {"API_KEY": "${API_KEY}"}

    filesystem = toml_of(capsys, str(REGISTRY_EXAMPLES / "filesystem.json"))
    npm = filesystem["io.github.modelcontextprotocol-filesystem-npm"]
    assert npm["args"] == ["-y", "@modelcontextprotocol/server-filesystem@1.0.2", "/Users/username/Desktop"]
    assert npm["env"] == {"LOG_LEVEL": "info"}
    oci = filesystem["io.github.modelcontextprotocol-filesystem-oci"]
    assert oci["command"] == "docker"
    assert oci["args"] == [
        "run",
        "-i",
        "--rm",
        "--mount",
        "type=bind,src=${SOURCE_PATH},dst=/project",
        "mcp/filesystem:1.0.2",
        "/project",
    ]


def test_status_and_the_latest_version_are_honoured(
    config: Path, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    old = server_json("io.github.team/api", "http://127.0.0.1:9/v1", version="1.9.0")
    new = server_json("io.github.team/api", "http://127.0.0.1:9/v2", version="2.0.0")
    older_listed_first = server_json("io.github.team/files", "http://127.0.0.1:9/files-1", version="1.0.0")
    newer = server_json("io.github.team/files", "http://127.0.0.1:9/files-10", version="1.10.0")
    entries = [
        {**old, OFFICIAL: {"isLatest": False}},
        {**new, OFFICIAL: {"isLatest": True}},
        {**server_json("io.github.team/gone", "http://127.0.0.1:9/gone"), OFFICIAL: {"status": "deleted"}},
        {**older_listed_first, OFFICIAL: {"isLatest": None}},
        {**newer, OFFICIAL: {"isLatest": None}},
        {
            **server_json("io.github.team/legacy", "http://127.0.0.1:9/legacy"),
            OFFICIAL: {"status": "deprecated"},
        },
    ]
    with Registry(entries, page_size=10) as registry:
        assert main(["import-registry", registry.url, "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "io.github.team/gone: skipped: deleted from the registry" in err
    assert "io.github.team/legacy: deprecated by its publisher" in err
    registered = servers(engine)
    assert registered["io.github.team-api"][1] == "http://127.0.0.1:9/v2", "the latest, not the first listed"
    assert registered["io.github.team-files"][1] == "http://127.0.0.1:9/files-10", "1.10.0 after 1.9 or 1.0"
    assert "io.github.team-gone" not in registered and "io.github.team-legacy" in registered


@pytest.mark.usefixtures("no_leaked_processes")
def test_poll_polls_servers_imported_from_the_registry(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = [tool("lookup", read_only=True)]
    (tmp_path / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
    with http_server("fastmcp_server.py", str(tmp_path / "tools.json")) as url:
        (tmp_path / "server.json").write_text(
            json.dumps(server_json("io.github.team/live", url)), encoding="utf-8"
        )
        assert main(["import-registry", str(tmp_path / "server.json"), "--config", str(config)]) == 0
        assert main(["poll", "--config", str(config)]) == 0, capsys.readouterr().err
    assert "io.github.team-live" in capsys.readouterr().out
