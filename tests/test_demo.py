"""The demo behind `python3 deploy/dev.py run` (deploy/demo.py, which dev.py runs with .venv's
interpreter): made once and reused, and refused in one line while another `serve` holds it.

Each run is the real script in a subprocess, on a demo folder of the test's own (`--dir`), up to
the point where it would start `serve` (`--no-serve`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session
from support.service import migrate_config, serving

from monitor.store.models import Alert, Server, Snapshot

ROOT = Path(__file__).resolve().parent.parent
TOKEN_ENV = "TEST_DEMO_TOKEN"


def demo(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "deploy" / "demo.py"), "--dir", str(folder), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)


LOADING = """
import json, runpy, sys
record, sys.argv = sys.argv[1], sys.argv[2:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    with open(record, "w") as out:
        json.dump(sorted(name for name in sys.modules if name.startswith("monitor")), out)
"""
"""Runs deploy/demo.py as `python deploy/demo.py ARGS` does, then records which of our modules it loaded."""


def demo_loading(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """A demo run, and the `monitor` modules it had loaded when it exited."""
    record = folder.parent / f"{folder.name}-modules.json"
    script = [str(ROOT / "deploy" / "demo.py"), "--dir", str(folder), *args]
    command = [sys.executable, "-c", LOADING, str(record), *script]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    return result, json.loads(record.read_text(encoding="utf-8"))


def held(folder: Path) -> tuple[list[int], int, list[str]]:
    """The demo server's versions, how many alerts there are, and which servers are registered."""
    engine = create_engine(f"sqlite:///{folder / 'drift-monitor.db'}")
    try:
        with Session(engine) as session:
            versions = list(session.scalars(select(Snapshot.version).order_by(Snapshot.version)))
            alerts = session.scalar(select(func.count()).select_from(Alert)) or 0
            servers = list(session.scalars(select(Server.name)))
    finally:
        engine.dispose()
    return versions, alerts, servers


@pytest.mark.slow
def test_a_second_run_reuses_the_demo_and_says_so(tmp_path: Path) -> None:
    first = demo(tmp_path, "--no-serve")
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("$ drift-monitor poll") == 2
    versions, alerts, _ = held(tmp_path)
    assert versions == [1, 2]
    assert alerts >= 1

    second = demo(tmp_path, "--no-serve")
    assert second.returncode == 0, second.stdout + second.stderr
    assert held(tmp_path) == (versions, alerts, ["demo"])  # no poll, so no version and no alert more
    assert "drift-monitor poll" not in second.stdout
    (line,) = [line for line in second.stdout.splitlines() if "already holds the demo" in line]
    assert "(v1, v2; unresolved alerts:" in line
    assert "read-only-revoked" in line
    assert "--fresh" in line

    fresh = demo(tmp_path, "--no-serve", "--fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert fresh.stdout.count("$ drift-monitor poll") == 2
    assert "already holds the demo" not in fresh.stdout
    assert held(tmp_path) == (versions, alerts, ["demo"])  # made again from nothing: the same demo


@pytest.mark.slow
def test_a_serve_holding_the_demo_database_is_reported_in_one_line_before_anything(tmp_path: Path) -> None:
    config = tmp_path / "other.toml"
    database = tmp_path / "drift-monitor.db"
    config.write_text(
        f'[monitor]\ndatabase_url = "sqlite:///{database}"\napi_token_env = "{TOKEN_ENV}"\n', encoding="utf-8"
    )
    env = {**os.environ, TOKEN_ENV: "demo-test-token"}
    migrate_config(config, env)
    with serving(config, env) as other:
        port = other.url.rsplit(":", 1)[1]  # the port it holds too: the lock is what gets reported
        refused, loaded = demo_loading(tmp_path, "--port", port)
        assert refused.returncode == 1, refused.stderr
        assert refused.stdout == ""  # no migration, no poll: nothing was started
        (line,) = refused.stderr.splitlines()
        assert f"drift-monitor serve (pid {other.pid}) holds the demo database" in line
        assert str(database) in line
        assert held(tmp_path) == ([], 0, [])  # the demo server was not even registered
        assert not (tmp_path / "demo.toml").exists()
        # Refused before the service is loaded (the store, the scheduler: seconds on a busy machine).
        assert loaded == ["monitor", "monitor.collect", "monitor.collect.instancelock"]
