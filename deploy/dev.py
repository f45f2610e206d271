#!/usr/bin/env python3
"""Set up a local virtualenv and run drift-monitor or its checks: `python3 deploy/dev.py COMMAND`.

Needs only Python 3.11+. The environment lives in `.venv` at the repository root and is
reinstalled whenever pyproject.toml changes.

Commands:
  run     the service on its embedded default (SQLite), with a demo server registered, polled
          and changed once (deploy/demo.py); a later `run` reuses that demo (`run --fresh` makes
          it again); `run --port N`, or `run N`, serves the dashboard on another port than 8000
  test    the whole test suite, two workers per core (PostgreSQL too when
          DRIFT_MONITOR_TEST_PG_URL is set); extra arguments go to pytest
  check   ruff, mypy, the package's shape (deploy/architecture.py) and the declared
          dependencies (deptry, configured in pyproject.toml)
  bench   every benchmark under bench/
"""

from __future__ import annotations

import argparse
import hashlib
import os
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
    demo = demo_arguments(extra) if command == "run" else []  # a bad argument fails before any set-up
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
    return run(str(ROOT / "deploy" / "demo.py"), *demo)


def demo_arguments(extra: list[str]) -> list[str]:
    """deploy/demo.py's arguments: the port `run` serves on (`run`, `run 8080` or `run --port 8080`)
    and `--fresh` to make the demo again instead of reusing it. demo.py checks that the port is free,
    after it has checked that no other `serve` holds the demo database (that one would hold 8000)."""
    parser = argparse.ArgumentParser(prog="deploy/dev.py run", description="Run the demo on a port.")
    parser.add_argument("port", nargs="?", type=int, help="the dashboard's port (default 8000)")
    parser.add_argument("--port", dest="port_option", type=int, metavar="PORT", help="the same")
    parser.add_argument(
        "--fresh", action="store_true", help="delete the demo database and make the demo again"
    )
    args = parser.parse_args(extra)
    if args.port is not None and args.port_option is not None and args.port != args.port_option:
        parser.error("give the port once")
    port: int = args.port_option or args.port or 8000
    if not 0 < port < 65536:
        parser.error(f"port {port} is not between 1 and 65535")
    return ["--port", str(port), *(["--fresh"] if args.fresh else [])]


if __name__ == "__main__":
    sys.exit(main())
