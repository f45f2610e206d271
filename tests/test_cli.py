"""The command line, through a real subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import cli, http_server, tool

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(*args), capture_output=True, text=True, timeout=60, check=False)


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def flip(tmp_path: Path) -> tuple[Path, Path]:
    old = write(tmp_path / "old.json", {"tools": [tool("lookup", read_only=True)]})
    new = write(tmp_path / "new.json", [tool("lookup", read_only=False)])
    return old, new


def test_diff_read_only_flip_text_and_fail_on(flip: tuple[Path, Path]) -> None:
    result = run("diff", str(flip[0]), str(flip[1]))
    assert result.returncode == 0, result.stderr
    assert "CRITICAL" in result.stdout and "read-only-revoked" in result.stdout
    assert "\033[" not in result.stdout, "no colour when stdout is not a terminal"
    assert run("diff", str(flip[0]), str(flip[1]), "--fail-on", "high").returncode == 1
    assert run("diff", str(flip[0]), str(flip[1]), "--fail-on", "critical").returncode == 1


def test_diff_json_output(flip: tuple[Path, Path]) -> None:
    result = run("diff", str(flip[0]), str(flip[1]), "--format", "json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert set(data) == {"old_fingerprint", "new_fingerprint", "findings"}
    (finding,) = data["findings"]
    assert {k: finding[k] for k in ("rule", "severity", "tool", "field", "old", "new")} == {
        "rule": "read-only-revoked",
        "severity": "critical",
        "tool": "lookup",
        "field": "annotations.readOnlyHint",
        "old": True,
        "new": False,
    }
    assert finding["message"]


def test_fail_on_below_threshold_exits_zero(tmp_path: Path) -> None:
    old = write(tmp_path / "a.json", [tool("t", description="a", input_schema=None)])
    new = write(tmp_path / "b.json", [tool("t", description="b", input_schema=None)])
    assert run("diff", str(old), str(new), "--fail-on", "medium").returncode == 0
    assert run("diff", str(old), str(new), "--fail-on", "low").returncode == 1


def test_identical_listings(flip: tuple[Path, Path]) -> None:
    result = run("diff", str(flip[0]), str(flip[0]), "--fail-on", "info")
    assert result.returncode == 0
    assert "identical listings" in result.stdout


def test_fingerprint_command_matches_library(flip: tuple[Path, Path]) -> None:
    from monitor.core.fingerprint import fingerprint
    from monitor.core.listing import load_listing

    result = run("fingerprint", str(flip[0]))
    assert result.returncode == 0
    assert result.stdout.strip() == fingerprint(load_listing(flip[0]))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        (b"\xff\xfe".decode("latin-1"), "not JSON"),
        ('{"tools": [{"name": "a"}, {"name": "a"}]}', "duplicate tool name"),
        ('{"tools": [42]}', "expected an object"),
        ('{"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom"}}', "JSON-RPC error"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_malformed_input_is_one_line_exit_2(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    good = write(tmp_path / "good.json", [])
    for args in (("diff", str(bad), str(good)), ("diff", str(good), str(bad)), ("fingerprint", str(bad))):
        result = run(*args)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert message in result.stderr and str(bad) in result.stderr


def test_missing_file_and_bad_severity(tmp_path: Path) -> None:
    result = run("diff", str(tmp_path / "nope.json"), str(tmp_path / "nope2.json"))
    assert result.returncode == 2 and "cannot read" in result.stderr
    assert run("diff", "a", "b", "--fail-on", "severe").returncode == 2


def test_hidden_characters_and_escapes_are_shown_not_emitted(tmp_path: Path) -> None:
    old = write(tmp_path / "a.json", [tool("t", description="safe", input_schema=None)])
    hostile = tool("t\x1b[2J", description="safe\u202e\x1b]0;pwned\x07", input_schema=None)
    new = write(tmp_path / "b.json", [hostile])
    result = run("diff", str(old), str(new))
    assert result.returncode == 0
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "<U+202E>" in result.stdout and "<U+001B>" in result.stdout


def test_shipped_examples() -> None:
    result = run("diff", str(EXAMPLES / "before.json"), str(EXAMPLES / "after.json"), "--format", "json")
    rules = {f["rule"] for f in json.loads(result.stdout)["findings"]}
    assert {"read-only-revoked", "hidden-text-in-description", "tool-added"} <= rules


def test_rules_doc_is_generated_from_the_catalog() -> None:
    from monitor.cli.offline import rules_markdown

    doc = (EXAMPLES.parent / "rules.md").read_text(encoding="utf-8")
    assert doc.startswith(rules_markdown()), "regenerate: .venv/bin/python tests/support/corpus.py"
    result = run("rules")
    assert result.returncode == 0 and "read-only-revoked" in result.stdout


@pytest.mark.slow
def test_migrate_and_poll_through_the_command_line(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([tool("lookup")]))
    config = tmp_path / "monitor.toml"
    db = tmp_path / "monitor.db"
    with http_server("fastmcp_server.py", str(tools)) as url:
        config.write_text(
            f'[monitor]\ndatabase_url = "sqlite:///{db}"\npoll_timeout = "15s"\n\n'
            f'[[servers]]\nname = "live"\ntransport = "http"\nurl = "{url}"\n\n'
            '[[servers]]\nname = "dead"\ntransport = "http"\nurl = "http://127.0.0.1:9/mcp"\n'
        )
        not_migrated = run("poll", "--config", str(config))
        assert not_migrated.returncode == 2 and "drift-monitor migrate" in not_migrated.stderr
        assert run("migrate", "--config", str(config)).returncode == 0
        first = run("poll", "--config", str(config), "live")
        assert first.returncode == 0, first.stderr
        assert "live" in first.stdout and "1 tools" in first.stdout and "v1 new" in first.stdout
        both = run("poll", "--config", str(config))
        assert both.returncode == 3
        lines = both.stdout.splitlines()
        assert any(line.startswith("ok") and "v1 unchanged" in line for line in lines)
        assert any(line.startswith("FAIL dead") and "connection refused" in line for line in lines)
        unknown = run("poll", "--config", str(config), "nope")
        assert unknown.returncode == 2 and "no server named 'nope'" in unknown.stderr


def test_database_errors_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "not-a-database.db"
    db.write_bytes(b"this is not SQLite" * 100)
    config = tmp_path / "monitor.toml"
    config.write_text(f'[monitor]\ndatabase_url = "sqlite:///{db}"\n')
    result = run("migrate", "--config", str(config))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("drift-monitor: database error:") and "not a database" in result.stderr
