#!/usr/bin/env python3
"""Set up a local virtualenv and run drift-monitor or its checks: `python3 deploy/dev.py COMMAND`.

Needs only Python 3.11+. The environment lives in `.venv` at the repository root and is
reinstalled whenever pyproject.toml changes.

Commands:
  run     the service on its embedded default (SQLite), with a demo server registered
          (`run --port N`, or `run N`, serves the dashboard on another port than 8000)
  test    the whole test suite, two workers per core (PostgreSQL too when
          DRIFT_MONITOR_TEST_PG_URL is set); extra arguments go to pytest
  check   ruff, mypy, the package's shape (deploy/architecture.py) and the declared
          dependencies (deptry, configured in pyproject.toml)
  bench   every benchmark under bench/
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
STAMP = VENV / ".installed-from"

DEPTRY_TESTS = ("tests", "bench", "--exclude", r"\.venv", "--ignore", "DEP002,DEP004")
"""The second deptry run: every module tests/ and bench/ import is declared, directly (DEP001, DEP003).
Test and dev packages are theirs to import (DEP004 is for the package), and runtime dependencies
they leave unused are not unused (DEP002). The first run, `deptry .`, checks what gets installed."""


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this script runs on whatever python3 the machine has
        sys.exit(f"drift-monitor needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and PYTHON.exists():
        return
    if not PYTHON.exists():
        print("creating .venv ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing drift-monitor and its development dependencies into .venv ...", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True, cwd=ROOT)
    subprocess.run([*pip, "-e", ".[dev]"], check=True, cwd=ROOT)
    STAMP.write_text(wanted)


def run(*args: str) -> int:
    return subprocess.run([str(PYTHON), *args], cwd=ROOT, check=False).returncode


def main() -> int:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    extra = sys.argv[2:]
    if command not in {"run", "test", "check", "bench"}:
        print(__doc__, file=sys.stderr)
        return 2
    port = demo_port(extra) if command == "run" else 0  # a bad argument fails before any set-up
    if command == "run" and (busy := database_busy(DEMO / "drift-monitor.db")):
        print(f"deploy/dev.py run: {busy}", file=sys.stderr)  # before any set-up, in one line
        return 1
    ensure_venv()
    if command == "test":
        # Two workers per core: most tests wait on servers and processes they started, not the CPU.
        workers = str(2 * (os.cpu_count() or 1))
        return run("-m", "pytest", "-n", workers, "--dist", "worksteal", *extra)
    if command == "check":
        return (
            run("-m", "ruff", "check", ".")
            or run("-m", "ruff", "format", "--check", ".")
            or run("-m", "mypy")
            or run(str(ROOT / "deploy" / "architecture.py"))
            or run("-m", "deptry", ".")
            or run("-m", "deptry", *DEPTRY_TESTS)
        )
    if command == "bench":
        return run(str(ROOT / "bench" / "run.py"), *extra)
    return run_demo(port)


def demo_port(extra: list[str]) -> int:
    """The port `run` serves on: `run`, `run 8080` or `run --port 8080`; and it must be free."""
    parser = argparse.ArgumentParser(prog="deploy/dev.py run", description="Run the demo on a port.")
    parser.add_argument("port", nargs="?", type=int, help="the dashboard's port (default 8000)")
    parser.add_argument("--port", dest="port_option", type=int, metavar="PORT", help="the same")
    args = parser.parse_args(extra)
    if args.port is not None and args.port_option is not None and args.port != args.port_option:
        parser.error("give the port once")
    port: int = args.port_option or args.port or 8000
    if not 0 < port < 65536:
        parser.error(f"port {port} is not between 1 and 65535")
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            parser.error(f"port {port} on 127.0.0.1 is already in use (pick another with --port)")
    return port


DEMO = ROOT / ".drift-monitor"
"""Where `run` keeps the demo: its config, the tools file the demo server serves, its database."""


def database_busy(database: Path) -> str | None:
    """Why the demo database cannot be used now: the lock file `drift-monitor serve` holds beside a
    SQLite database (monitor/collect/scheduler.py, `lock_sqlite`) is taken. None: it is free."""
    import fcntl  # POSIX; where it is missing, serve itself says so

    lock = database.with_name(database.name + ".lock")
    if not lock.exists():
        return None
    with lock.open("a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            return (
                f"the demo database {database} is in use by another drift-monitor serve ({holder}): "
                "stop it (Ctrl-C where it runs) and run this again"
            )
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


def demo_versions(database: Path) -> int:
    """How many versions of the `demo` server the database holds (0: no demo made yet)."""
    import sqlite3

    if not database.exists():
        return 0
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = connection.execute(
            "SELECT count(*) FROM snapshots JOIN servers ON servers.id = snapshots.server_id"
            " WHERE servers.name = 'demo'"
        ).fetchone()
    except sqlite3.Error:  # not migrated yet
        return 0
    finally:
        connection.close()
    return int(row[0])


def run_demo(port: int, work: Path = DEMO) -> int:
    """Register the demo server, poll it, change its tools the way a careless deploy would, poll
    again; a second run reuses the demo it made (no new versions) and says so."""
    work.mkdir(exist_ok=True)
    database = work / "drift-monitor.db"
    if busy := database_busy(database):
        print(f"deploy/dev.py run: {busy}", file=sys.stderr, flush=True)
        return 1
    tools = work / "demo-tools.json"
    config = work / "demo.toml"
    config.write_text(
        "[monitor]\n"
        f'database_url = "sqlite:///{database.as_posix()}"\n\n'
        "[[servers]]\n"
        'name = "demo"\n'
        'transport = "stdio"\n'
        f"command = {json.dumps(str(PYTHON))}\n"
        f"args = {json.dumps([str(ROOT / 'tests' / 'servers' / 'fastmcp_server.py'), str(tools)])}\n",
        encoding="utf-8",
    )
    examples = ROOT / "docs" / "examples"
    cli = ["-m", "monitor.cli"]
    if code := run(*cli, "migrate", "--config", str(config)):
        return code
    made = demo_versions(database)
    if made >= 2:
        print(
            f"\nReusing the demo made earlier: {made} versions of `demo` in {database} "
            f"(delete {work} to make it again).",
            flush=True,
        )
    for example in () if made >= 2 else ("before.json", "after.json"):
        listing = json.loads((examples / example).read_text(encoding="utf-8"))
        tools.write_text(json.dumps(listing.get("result", listing)["tools"]), encoding="utf-8")
        print(f"\n$ drift-monitor poll   # demo server now serving docs/examples/{example}", flush=True)
        if (code := run(*cli, "poll", "--config", str(config))) != 0:
            return code
    token = os.environ.get("DRIFT_MONITOR_API_TOKEN") or secrets.token_urlsafe(16)
    print(
        f"\n$ drift-monitor serve   # dashboard: http://127.0.0.1:{port}/  (sign in with API token {token})\n"
        "Ctrl-C stops it.",
        flush=True,
    )
    env = {**os.environ, "DRIFT_MONITOR_API_TOKEN": token}
    return serve([str(PYTHON), *cli, "serve", "--config", str(config), "--port", str(port)], env)


def serve(command: list[str], env: dict[str, str]) -> int:
    """Run `drift-monitor serve` in the foreground until Ctrl-C."""
    try:
        return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
