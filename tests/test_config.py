from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.collect.targets import target_for
from monitor.config import ConfigError, load_config, parse_duration


def write(tmp_path: Path, text: str, name: str = "monitor.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_spec_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_TOKEN", "tok-123456")
    path = write(
        tmp_path,
        """
[monitor]
database_url = "sqlite:///x.db"
poll_interval = "60s"
api_token_env = "DRIFT_MONITOR_API_TOKEN"

[[servers]]
name = "search"
transport = "http"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }
interval = "5m"

[[servers]]
name = "git"
transport = "stdio"
command = "mcp-server-git"
args = ["--repository", "/srv/repo"]

[[webhooks]]
name = "ops"
url = "https://hooks.example.com/drift"
secret_env = "OPS_WEBHOOK_SECRET"
min_severity = "high"
""",
    )
    config = load_config(path)
    assert config.monitor.poll_interval == 60
    search = config.server("search")
    assert search.interval == 300
    assert search.headers == {"Authorization": "Bearer ${SEARCH_TOKEN}"}, "stored unexpanded"
    assert target_for(config, search).headers == {"Authorization": "Bearer tok-123456"}
    assert config.server("git").args == ["--repository", "/srv/repo"]
    assert config.webhooks[0].min_severity.value == "high"


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, '[monitor]\ndatabase_url = "sqlite:///file.db"\npoll_interval = "2m"\n')
    monkeypatch.setenv("DRIFT_MONITOR_DATABASE_URL", "sqlite:///env.db")
    config = load_config(path)
    assert config.monitor.database_url == "sqlite:///env.db"
    assert config.monitor.poll_interval == 120


def test_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DRIFT_MONITOR_DATABASE_URL", raising=False)
    assert load_config(None).monitor.database_url == "sqlite:///drift-monitor.db"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[servers]]\nname = "git"\ntransport = "stdio"\n', "servers[0] ('git'): command: required"),
        ('[[servers]]\nname = "w"\ntransport = "http"\n', "servers[0] ('w'): url: required"),
        ('[[servers]]\nname = "w"\ntransport = "ftp"\nurl="x"\n', "servers[0] ('w'): transport:"),
        (
            '[[servers]]\nname = "w"\ntransport = "http"\nurl = "http://a"\nintervl = "5m"\n',
            "servers[0] ('w'): intervl: unknown key",
        ),
        ('[[servers]]\nname = "w"\ntransport = "http"\nurl = "http://a"\ninterval = "soon"\n', "interval:"),
        ('[monitor]\npoll_interval = "-5s"\n', "[monitor] poll_interval:"),
        ("[monitor\n", "not valid TOML"),
        ('[[servers]]\nname = "a"\ntransport = "http"\nurl = "http://a"\n' * 2, "defined twice"),
        ("[other]\n", "other: unknown section (the sections are monitor, servers, webhooks,"),
        ('[monitor]\npoll_intervall = "5m"\n', "[monitor] poll_intervall: unknown key"),
        ('[decisions]\nstale = "deny"\n', "[decisions] stale: unknown key"),
        ('[auth]\nusers = { ann = "viewer" }\nsession_hour = 2\n', "[auth] session_hour: unknown key"),
        (
            '[[webhooks]]\nname = "t"\nurl = "http://a"\nformat = "teams"\n',
            "webhooks[0] ('t'): format: not a sink",
        ),
        (
            '[[webhooks]]\nname = "p"\nformat = "pagerduty"\n',
            "webhooks[0] ('p'): routing_key_env: Field required",
        ),
        ('[aliases]\ngithub = ["gh", "not a name"]\n', "[aliases] github.1: String should match pattern"),
        ('[tracing]\notlp_endpoints = "http://127.0.0.1:4318"\n', "[tracing] otlp_endpoints: unknown key"),
        (
            '[tracing]\notlp_endpoint = "collector:4318"\n',
            "[tracing] otlp_endpoint: not an http:// or https:// URL",
        ),
    ],
)
def test_bad_config_names_file_server_and_field(tmp_path: Path, text: str, expected: str) -> None:
    """One line: the file, where in it (section, entry, key) and what is wrong."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_tracing_section(tmp_path: Path) -> None:
    """`[tracing]` (docs/running.md, "Tracing"): off without an endpoint, the service named drift-monitor."""
    assert load_config(write(tmp_path, "")).tracing.otlp_endpoint is None
    path = write(tmp_path, '[tracing]\notlp_endpoint = "http://127.0.0.1:4318"\nservice_name = "dm-eu"\n')
    settings = load_config(path).tracing
    assert (settings.otlp_endpoint, settings.service_name) == ("http://127.0.0.1:4318", "dm-eu")


def test_missing_variable_is_named_without_leaking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    path = write(
        tmp_path,
        '[[servers]]\nname = "s"\ntransport = "http"\nurl = "http://127.0.0.1/mcp"\n'
        'headers = { Authorization = "Bearer ${NOPE_TOKEN}" }\n',
    )
    config = load_config(path)
    with pytest.raises(
        ConfigError, match=r"server 's': headers.Authorization: environment variable NOPE_TOKEN"
    ):
        target_for(config, config.server("s"))


def test_import_mcp_servers_json(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "remote": {"url": "https://example.com/mcp", "headers": {"X-Key": "${KEY}"}},
                    "legacy": {"type": "sse", "url": "https://example.com/sse"},
                }
            }
        )
    )
    path = write(tmp_path, '[monitor]\nimport = "mcp.json"\n')
    config = load_config(path)
    by_name = {server.name: server for server in config.servers}
    assert by_name["time"].transport == "stdio" and by_name["time"].env == {"TZ": "UTC"}
    assert by_name["remote"].transport == "http" and by_name["remote"].headers == {"X-Key": "${KEY}"}
    assert by_name["legacy"].transport == "sse"


def test_import_errors(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"x": {"args": []}}}')
    path = write(tmp_path, '[monitor]\nimport = "mcp.json"\n')
    config = load_config(path)  # one bad entry is reported by name and skipped (docs/contract.md section 11)
    assert config.servers == []
    assert len(config.skipped) == 1 and "'x' skipped: command or url: one is required" in config.skipped[0]
    path = write(tmp_path, '[monitor]\nimport = "missing.json"\n')
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), (45, 45), ("2d", 172800)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "m5", "0s", True, None])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)
