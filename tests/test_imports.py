"""Server imports from the files hosts write (docs/contract.md section 11): each format, bad entries,
variables, SSE fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from support import http_server

from monitor.collect.client import Limits, PollError, fetch_listing
from monitor.collect.targets import target_for
from monitor.config import Config, ConfigError, load_config

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


def imported(tmp_path: Path, host_file: Any, name: str = "mcp.json", folder: str = "") -> Config:
    where = tmp_path / folder if folder else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    (where / name).write_text(json.dumps(host_file), encoding="utf-8")
    relative = f"{folder}/{name}" if folder else name
    config = tmp_path / "monitor.toml"
    config.write_text(f'[monitor]\nimport = "{relative}"\n', encoding="utf-8")
    return load_config(config)


def shape(config: Config) -> dict[str, tuple[str, str | None, bool]]:
    return {s.name: (s.transport, s.url or s.command, s.sse_fallback) for s in config.servers}


def test_claude_desktop(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "mcpServers": {
                "filesystem": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
                },
                "github": {
                    "command": "docker",
                    "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
                    "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"},
                },
            }
        },
        name="claude_desktop_config.json",
    )
    assert shape(config) == {"filesystem": ("stdio", "npx", False), "github": ("stdio", "docker", False)}
    assert config.server("github").env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}
    assert config.skipped == []


def test_claude_code_project_file_with_defaults(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "mcpServers": {
                "api": {
                    "type": "http",
                    "url": "${API_BASE_URL:-https://api.example.com}/mcp",
                    "headers": {"Authorization": "Bearer ${API_KEY}"},
                },
                "events": {"type": "sse", "url": "https://events.example.com/sse"},
            }
        },
        name=".mcp.json",
    )
    assert shape(config) == {
        "api": ("http", "${API_BASE_URL:-https://api.example.com}/mcp", False),
        "events": ("sse", "https://events.example.com/sse", False),
    }
    target = target_for(config, config.server("api"), {"API_KEY": "k-1"})
    assert target.url == "https://api.example.com/mcp", "the default, when the variable is unset"
    assert target.headers == {"Authorization": "Bearer k-1"}, "sent expanded, never literally"
    assert target.secrets == ("k-1",)
    overridden = target_for(config, config.server("api"), {"API_KEY": "k", "API_BASE_URL": "https://x.test"})
    assert overridden.url == "https://x.test/mcp"


def test_cursor_url_only_falls_back_to_sse(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "mcpServers": {
                "remote": {"url": "https://mcp.example.com/sse", "headers": {"API_KEY": "${env:REMOTE_KEY}"}},
                "local": {"command": "python", "args": ["${workspaceFolder}/server.py"], "env": {}},
            }
        },
        folder=".cursor",
    )
    assert shape(config)["remote"] == ("http", "https://mcp.example.com/sse", True)
    assert config.server("remote").headers == {"API_KEY": "${REMOTE_KEY}"}
    assert config.server("local").args == [f"{tmp_path.resolve()}/server.py"], "the project folder"


def test_vscode_servers_type_inputs_and_env(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "inputs": [
                {
                    "type": "promptString",
                    "id": "perplexity-key",
                    "description": "Perplexity API Key",
                    "password": True,
                }
            ],
            "servers": {
                "Perplexity": {
                    "type": "stdio",
                    "command": "npx",
                    "args": ["-y", "server-perplexity-ask"],
                    "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}"},
                },
                "github": {
                    "type": "http",
                    "url": "https://api.githubcopilot.com/mcp/",
                    "headers": {"Authorization": "Bearer ${env:GITHUB_TOKEN}"},
                },
                "legacy": {"type": "sse", "url": "http://localhost:3000/sse"},
            },
        },
        folder=".vscode",
    )
    assert shape(config) == {
        "Perplexity": ("stdio", "npx", False),
        "github": ("http", "https://api.githubcopilot.com/mcp/", False),
        "legacy": ("sse", "http://localhost:3000/sse", False),
    }
    assert config.server("Perplexity").env == {"PERPLEXITY_API_KEY": "${DRIFT_MONITOR_INPUT_PERPLEXITY_KEY}"}
    target = target_for(config, config.server("github"), {"GITHUB_TOKEN": "ghp_secret"})
    assert target.headers == {"Authorization": "Bearer ghp_secret"}
    with pytest.raises(ConfigError, match="GITHUB_TOKEN is not set") as error:
        target_for(config, config.server("github"), {})
    assert "ghp" not in str(error.value)


def test_windsurf_server_url(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "mcpServers": {
                "figma": {"serverUrl": "http://127.0.0.1:3845/sse"},
                "brave": {
                    "command": "npx",
                    "args": ["-y", "@mcp/brave"],
                    "env": {"BRAVE_API_KEY": "${env:BRAVE}"},
                    "disabled": False,
                },
            }
        },
        name="mcp_config.json",
    )
    assert shape(config) == {
        "figma": ("http", "http://127.0.0.1:3845/sse", True),
        "brave": ("stdio", "npx", False),
    }
    assert config.server("brave").env == {"BRAVE_API_KEY": "${BRAVE}"}


def test_gemini_cli_http_url_and_sse_url(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "theme": "GitHub",
            "mcpServers": {
                "httpServer": {"httpUrl": "http://localhost:3000/mcp", "timeout": 5000},
                "sseServer": {"url": "http://localhost:8080/sse", "headers": {"X-Key": "$KEY"}},
                "python": {
                    "command": "python",
                    "args": ["-m", "my_server"],
                    "cwd": "./server",
                    "trust": False,
                },
            },
        },
        name="settings.json",
        folder=".gemini",
    )
    assert shape(config) == {
        "httpServer": ("http", "http://localhost:3000/mcp", False),
        "sseServer": ("http", "http://localhost:8080/sse", True),
        "python": ("stdio", "python", False),
    }


def test_bad_entries_are_named_and_skipped(tmp_path: Path) -> None:
    config = imported(
        tmp_path,
        {
            "mcpServers": {
                "my server": {"command": "x"},
                "numbers": {"command": "x", "env": {"PORT": 8080}},
                "nothing": {"args": ["a"]},
                "ftp": {"url": "ftp://example.com"},
                "websocket": {"type": "ws", "url": "ws://example.com"},
                "unknown-var": {"command": "x", "args": ["${command:pickFile}"]},
                "off": {"command": "x", "disabled": True},
                "good": {"command": "mcp-server-git"},
            }
        },
    )
    assert [server.name for server in config.servers] == ["good"]
    skipped = "\n".join(config.skipped)
    for name, reason in [
        ("my server", "name:"),
        ("numbers", "env.PORT: must be a string (got int)"),
        ("nothing", "command or url"),
        ("ftp", "must start with http"),
        ("websocket", "'ws' is not a remote transport"),
        ("unknown-var", "unsupported variable ${command:pickFile}"),
    ]:
        assert f"{name!r} skipped: " in skipped and reason in skipped, (name, skipped)
    assert "'off'" not in skipped, "disabled entries are skipped quietly"
    assert len(config.skipped) == 6


def test_a_file_without_servers_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no 'mcpServers'"):
        imported(tmp_path, {"theme": "dark"})
    with pytest.raises(ConfigError, match="not JSON"):
        (tmp_path / "broken.json").write_text("{", encoding="utf-8")
        (tmp_path / "monitor.toml").write_text('[monitor]\nimport = "broken.json"\n', encoding="utf-8")
        load_config(tmp_path / "monitor.toml")


def test_undeclared_input_is_an_entry_error(tmp_path: Path) -> None:
    config = imported(tmp_path, {"servers": {"a": {"command": "x", "env": {"K": "${input:missing}"}}}})
    assert config.servers == []
    assert "'a' skipped: env.K: ${input:missing} is not declared in 'inputs'" in config.skipped[0]


@pytest.mark.usefixtures("no_leaked_processes")
def test_url_only_entry_reaches_an_sse_server(tmp_path: Path) -> None:
    """Cursor's bare `url` on a server that only speaks SSE: the poll falls back as hosts do."""
    tools = json.loads((EXAMPLES / "before.json").read_text(encoding="utf-8"))["tools"]
    (tmp_path / "tools.json").write_text(json.dumps(tools), encoding="utf-8")
    with http_server("fastmcp_server.py", str(tmp_path / "tools.json"), transport="sse") as url:
        config = imported(
            tmp_path, {"mcpServers": {"legacy": {"url": url}, "strict": {"type": "http", "url": url}}}
        )
        listing = anyio.run(fetch_listing, target_for(config, config.server("legacy")), Limits(timeout=20))
        assert listing.tools == tools
        with pytest.raises(PollError, match="405"):
            anyio.run(fetch_listing, target_for(config, config.server("strict")), Limits(timeout=20))


def test_a_config_table_wins_over_an_imported_entry(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(
        json.dumps({"mcpServers": {"git": {"command": "from-host"}, "time": {"command": "mcp-time"}}}),
        encoding="utf-8",
    )
    (tmp_path / "monitor.toml").write_text(
        '[monitor]\nimport = "mcp.json"\n\n'
        '[[servers]]\nname = "git"\ntransport = "stdio"\ncommand = "ours"\n',
        encoding="utf-8",
    )
    config = load_config(tmp_path / "monitor.toml")
    assert shape(config) == {"git": ("stdio", "ours", False), "time": ("stdio", "mcp-time", False)}
    assert config.skipped == [
        f"{tmp_path / 'monitor.toml'}: import: 'git' skipped: also defined in [[servers]]"
    ]
