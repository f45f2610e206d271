"""Server imports from the files hosts write (docs/contract.md section 11): each format, bad entries,
variables, SSE fallback."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from support import http_server
from support.web import TOKEN_ENV, web_client

from monitor.collect.client import Limits, PollError, fetch_listing
from monitor.collect.poller import Poller
from monitor.collect.scheduler import Scheduler
from monitor.collect.targets import target_for
from monitor.config import Config, ConfigError, load_config
from monitor.store import Store

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
        f"{tmp_path / 'monitor.toml'}: import 'mcp.json': 'git' skipped: already defined "
        "(in [[servers]] or an earlier import)"
    ]


def written(tmp_path: Path, files: dict[str, str], imports: str) -> Config:
    """A config importing host files written as given (text, so comments and commas are kept)."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    config = tmp_path / "monitor.toml"
    database = (tmp_path / "m.db").as_posix()
    config.write_text(
        f'[monitor]\ndatabase_url = "sqlite:///{database}"\nimport = {imports}\n', encoding="utf-8"
    )
    return load_config(config)


def test_an_unresolvable_entry_is_skipped_and_the_rest_polled(tmp_path: Path, store: Store) -> None:
    """A teammate's `${TOKEN}` unset, an envFile that is not there: those two are named and left out;
    every other server is polled (before, one unset variable stopped `poll` and `serve` entirely)."""
    config = imported(
        tmp_path,
        {
            "servers": {
                "team": {
                    "type": "http",
                    "url": "https://team.example/mcp",
                    "headers": {"X": "${UNSET_TEAM_KEY}"},
                },
                "dotenv": {"command": "python3", "envFile": "${workspaceFolder}/missing.env"},
                "fine": {"type": "http", "url": "https://fine.example/mcp"},
            }
        },
        folder=".vscode",
    )
    poller = Poller(store, config)
    try:
        jobs = poller.jobs()
    finally:
        poller.close()
    assert [job.target.name for job in jobs] == ["fine"]
    team, dotenv = sorted(poller.skipped)
    assert "'dotenv'" in team and "env_file: cannot read" in team and "missing.env" in team
    assert "'team'" in dotenv and "UNSET_TEAM_KEY is not set" in dotenv and dotenv.endswith("not polled")


def test_skipped_entries_are_shown_in_the_log_the_api_and_the_dashboard(
    tmp_path: Path, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    config = imported(
        tmp_path, {"mcpServers": {"team": {"url": "https://team.example/mcp?k=${UNSET_TEAM_KEY}"}}}
    )
    config.monitor.api_token_env = TOKEN_ENV
    scheduler = Scheduler(store, Poller(store, config), config, "test", tick_seconds=3600)
    try:
        with caplog.at_level("WARNING", logger="drift_monitor"):
            scheduler.register(datetime.now(UTC))
    finally:
        scheduler.poller.close()
    assert scheduler.targets == {}, "registered, not polled"
    (line,) = [r.getMessage() for r in caplog.records if "'team'" in r.getMessage()]
    assert "UNSET_TEAM_KEY is not set" in line
    with web_client(store, config) as client:
        assert client.get("/api/v1/config/skipped").json() == {"skipped": [line]}
        page = client.get("/").text
    assert "Configured but not monitored (1)" in page and "UNSET_TEAM_KEY is not set" in page


def test_vscode_jsonc_comments_and_trailing_commas(tmp_path: Path) -> None:
    text = """{
  // Servers for this workspace
  "servers": {
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/", /* remote */
    },
  },
}
"""
    config = written(tmp_path, {".vscode/mcp.json": text}, '".vscode/mcp.json"')
    assert shape(config) == {"github": ("http", "https://api.githubcopilot.com/mcp/", False)}


def test_env_file_is_read_when_polled_and_env_wins(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "# local secrets\nexport API_KEY='from-file'\nREGION=eu  # inline comment\nQUOTED=\"a b\"\n",
        encoding="utf-8",
    )
    config = written(
        tmp_path,
        {
            ".vscode/mcp.json": '{"servers": {"s": {"command": "python3", '
            '"envFile": "${workspaceFolder}/.env", "env": {"REGION": "us"}}}}'
        },
        '".vscode/mcp.json"',
    )
    target = target_for(config, config.server("s"), {})
    assert target.env == {"API_KEY": "from-file", "REGION": "us", "QUOTED": "a b"}
    assert "from-file" in target.secrets, "kept out of errors and logs like any expanded value"
    assert config.server("s").env == {"REGION": "us"}, "the file's values are never part of the config"


def test_gemini_bare_variables_are_expanded(tmp_path: Path) -> None:
    config = written(
        tmp_path,
        {
            ".gemini/settings.json": '{"mcpServers": {"api": {"httpUrl": "https://api.example/mcp", '
            '"headers": {"Authorization": "Bearer $API_TOKEN"}, "env": {}}}}'
        },
        '".gemini/settings.json"',
    )
    target = target_for(config, config.server("api"), {"API_TOKEN": "t0k"})
    assert target.headers == {"Authorization": "Bearer t0k"}, "not the literal '$API_TOKEN'"


@pytest.mark.usefixtures("no_leaked_processes")
def test_a_relative_cwd_is_the_hosts_and_a_missing_one_is_named(tmp_path: Path) -> None:
    """VS Code joins a relative `cwd` to the workspace folder (the one holding `.vscode/`)."""
    config = written(
        tmp_path,
        {
            "project/.vscode/mcp.json": '{"servers": {"py": {"command": "python3", "args": ["-c", "pass"], '
            '"cwd": "tools"}}}'
        },
        '"project/.vscode/mcp.json"',
    )
    assert config.server("py").cwd == str((tmp_path / "project" / "tools").resolve())
    with pytest.raises(PollError) as error:
        anyio.run(fetch_listing, target_for(config, config.server("py")), Limits(timeout=20))
    assert "working directory" in str(error.value) and "project/tools" in str(error.value)


HOST_RULES = [
    # (the host's file, its server map key, where a relative cwd lands, where it starts without one,
    #  where a relative envFile lands (None: not read), what the monitor says it ignored)
    ("project/.gemini/settings.json", "mcpServers", "project/mcp_tools", "project", None, "envFile"),
    ("project/.vscode/mcp.json", "servers", "project/mcp_tools", "project", "project/.env", None),
    ("project/.cursor/mcp.json", "mcpServers", "project/mcp_tools", "project", "project/.env", None),
    ("project/.mcp.json", "mcpServers", "project", "project", None, "cwd, envFile"),
    ("home/.claude.json", "mcpServers", "HOME", "HOME", None, "cwd, envFile"),
    ("home/claude_desktop_config.json", "mcpServers", "HOME", "HOME", None, "cwd, envFile"),
    ("home/.codeium/windsurf/mcp_config.json", "mcpServers", "HOME", "HOME", None, "cwd, envFile"),
]
"""Each host's rule, from its sources (docs/integrations.md): Gemini CLI starts servers where it was
launched (the folder holding `.gemini/`) and passes `cwd` to the process as it is; VS Code joins
`cwd` to the workspace folder; Cursor follows VS Code's reading; Claude Code ignores `cwd` and starts
servers in the project root; Claude Desktop and Windsurf start them in the user's home."""


@pytest.mark.parametrize(("file", "key", "relative", "absent", "env_file", "ignored"), HOST_RULES)
def test_each_host_starts_its_servers_where_it_would(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    file: str,
    key: str,
    relative: str,
    absent: str,
    env_file: str | None,
    ignored: str | None,
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    entries = {
        "given": {"command": "./run.sh", "cwd": "./mcp_tools", "envFile": ".env"},
        "bare": {"command": "./run.sh"},
    }
    config = written(tmp_path, {file: json.dumps({key: entries})}, json.dumps(file))

    def where(spot: str) -> str:
        return str(home.resolve()) if spot == "HOME" else str((tmp_path / spot).resolve())

    assert config.server("given").cwd == where(relative)
    assert config.server("bare").cwd == where(absent)
    assert config.server("given").env_file == (where(env_file) if env_file else None)
    notes = [line for line in config.skipped if "'given'" in line]
    assert notes == (
        [
            f"{config.source}: import {str((tmp_path / file).resolve())!r}: 'given': {ignored} ignored, as "
            f"{notes[0].rsplit('as ', 1)[1]}"
        ]
        if ignored
        else []
    ), notes


def test_several_host_files(tmp_path: Path) -> None:
    config = written(
        tmp_path,
        {
            "claude.json": '{"mcpServers": {"git": {"command": "mcp-server-git"}}}',
            ".vscode/mcp.json": '{"servers": {"git": {"command": "other"}, "time": {"command": "mcp-time"}}}',
        },
        '["claude.json", ".vscode/mcp.json"]',
    )
    assert shape(config) == {"git": ("stdio", "mcp-server-git", False), "time": ("stdio", "mcp-time", False)}
    assert len(config.skipped) == 1 and "'git' skipped: already defined" in config.skipped[0]
