"""What an operator meets first: startup errors as one line, `--version`, pipes, stdin, and `serve`'s logs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from support import WAIT, Process, cli, migrate_config, numbered_tools, refused_url, run_cli, tool

pytestmark = pytest.mark.usefixtures("no_leaked_processes")


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("drift-monitor ")


def test_diff_reads_stdin(tmp_path: Path) -> None:
    old = json.dumps({"tools": [tool("lookup", read_only=True)]})
    new = tmp_path / "new.json"
    new.write_text(json.dumps([tool("lookup", read_only=False)]), encoding="utf-8")
    result = run_cli("diff", "-", str(new), "--format", "json", stdin=old)
    assert result.returncode == 0, result.stderr
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["read-only-revoked"]
    fingerprint = run_cli("fingerprint", "-", stdin=old)
    assert fingerprint.returncode == 0 and len(fingerprint.stdout.strip()) == 64
    both = run_cli("diff", "-", "-", stdin=old)
    assert both.returncode == 2 and "only one of OLD and NEW" in both.stderr
    garbage = run_cli("diff", "-", str(new), stdin="{not json")
    assert garbage.returncode == 2 and garbage.stderr.startswith("drift-monitor: <stdin>: not JSON")


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    tools = numbered_tools(3000, "t{}", read_only=True, description="x" * 200)
    (tmp_path / "old.json").write_text(json.dumps(tools), encoding="utf-8")
    for item in tools:
        item["annotations"]["readOnlyHint"] = False
    (tmp_path / "new.json").write_text(json.dumps(tools), encoding="utf-8")
    process = subprocess.Popen(
        cli("diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline()  # like `| head -1`: read a line, then close the pipe
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert stderr == "", "no BrokenPipeError traceback"


@pytest.mark.slow
def test_startup_failures_are_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "DRIFT_MONITOR_DATABASE_URL": "mysql://user@127.0.0.1/db"}
    mysql = run_cli("migrate", env=env)
    assert mysql.returncode == 2
    assert mysql.stderr.strip().splitlines() == [
        "drift-monitor: (environment): [monitor] database_url: unsupported database 'mysql': "
        "use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
    ]
    missing = run_cli("poll", "--config", str(tmp_path / "nowhere.toml"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "cannot read" in missing.stderr

    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[monitor]\ndatabase_url = "sqlite:///{(tmp_path / "m.db").as_posix()}"\n', encoding="utf-8"
    )
    migrate_config(config, os.environ)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = run_cli("serve", "--config", str(config), "--port", str(port))
    assert busy.returncode == 2
    assert busy.stderr.strip().splitlines()[-1] == (
        f"drift-monitor: cannot listen on 127.0.0.1:{port}: the port is already in use"
    )
    assert "Traceback" not in busy.stderr and "Errno" not in busy.stderr


@pytest.mark.slow
def test_serve_logs_failures_as_json_lines_without_scheduler_chatter(tmp_path: Path) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[monitor]\ndatabase_url = "sqlite:///{(tmp_path / "m.db").as_posix()}"\npoll_interval = "1s"\n\n'
        f'[[servers]]\nname = "down"\ntransport = "http"\nurl = "{refused_url()}"\n',
        encoding="utf-8",
    )
    migrate_config(config, os.environ)
    argv = cli("serve", "--config", str(config), "--port", "0", "--log-format", "json")
    with Process(argv, env=os.environ) as service:
        (url,) = service.ready()
        assert httpx.get(f"{url}/healthz", timeout=WAIT).status_code == 200, "no access line at info"
        for _ in range(2):  # at least two ticks of the scheduler, each with its poll
            line = service.wait_for('{"time"')
            while '"poll.failed"' not in line:
                line = service.wait_for('{"time"')
        service.stop()
    logs = [line for line in service.lines if not line.startswith("READY ")]
    entries = [json.loads(line) for line in logs]  # every line is one JSON object
    failed = [e for e in entries if e.get("event") == "poll.failed"]
    assert len(failed) >= 2
    assert failed[0]["server"] == "down" and failed[0]["level"] == "warning"
    assert failed[0]["message"].startswith("poll down failed: connect: ")
    assert not [e for e in entries if e["logger"].startswith(("apscheduler", "uvicorn.access"))]
    assert not [line for line in logs if "\x1b" in line or "\\u001b" in line], "no ANSI colour codes"
    assert any(e["logger"] == "uvicorn.error" for e in entries), "uvicorn's start-up lines, plain"
