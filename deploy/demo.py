"""The demo behind `python3 deploy/dev.py run`, run with the interpreter of `.venv`.

It sets up a demo once and reuses it: the first run registers the demo server (a real MCP server
over stdio), polls it serving `docs/examples/before.json`, changes its tools to
`docs/examples/after.json` the way a careless deploy would and polls again (version 2, with a
`read-only-revoked` critical and the alert it opened). A later run finds those versions in the
database, says so and polls nothing, so the demo's history does not grow; `--fresh` starts over.
Either way `drift-monitor serve` runs on it last.

The demo holds the lock `serve` takes (`monitor/collect/instancelock.py`) while it sets up, so a
`serve` already running on the database is reported in one line before anything is touched, and
before the rest of the service is even loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from monitor.collect.instancelock import InstanceLockError, lock_sqlite

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("before.json", "after.json")
"""The listings the demo server serves, in order: version N of the demo is `EXAMPLES[N - 1]`."""
DEMO_SERVER = "demo"
DATABASE = "drift-monitor.db"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/dev.py run", description=__doc__)
    parser.add_argument("--port", type=int, default=8000, help="the dashboard's port (default 8000)")
    parser.add_argument("--fresh", action="store_true", help="delete the demo database and make it again")
    parser.add_argument(
        "--dir", type=Path, default=ROOT / ".drift-monitor", help="where the demo's config and database live"
    )
    parser.add_argument("--no-serve", action="store_true", help="set the demo up, then exit")
    args = parser.parse_args(argv)
    work: Path = args.dir
    work.mkdir(parents=True, exist_ok=True)
    database = work / DATABASE
    try:
        lock = lock_sqlite(database_url(database), role="deploy/dev.py run, setting up its demo")
    except InstanceLockError as exc:
        print(
            f"deploy/dev.py run: {exc.holder} holds the demo database "
            f"{database}; stop it (or use its dashboard) and run again. Nothing was changed.",
            file=sys.stderr,
            flush=True,
        )
        return 1
    try:
        if not args.no_serve and not port_free(args.port):
            print(
                f"deploy/dev.py run: port {args.port} on 127.0.0.1 is in use (pick another with --port)",
                file=sys.stderr,
            )
            return 2
        config = set_up(work, fresh=args.fresh)
    finally:
        if lock is not None:
            lock.close()  # `serve` takes it next
    if isinstance(config, int):
        return config
    return 0 if args.no_serve else serve(config, args.port)


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def database_url(database: Path) -> str:
    return f"sqlite:///{database.as_posix()}"


def set_up(work: Path, *, fresh: bool) -> Path | int:
    """The demo's config, its database migrated and holding both versions; an exit code on failure."""
    database = work / DATABASE
    if fresh:
        for suffix in ("", "-wal", "-shm", "-journal"):
            database.with_name(database.name + suffix).unlink(missing_ok=True)
    tools = work / "demo-tools.json"
    config = work / "demo.toml"
    config.write_text(
        "[monitor]\n"
        f"database_url = {json.dumps(database_url(database))}\n\n"
        "[[servers]]\n"
        f'name = "{DEMO_SERVER}"\n'
        'transport = "stdio"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps([str(ROOT / 'tests' / 'servers' / 'fastmcp_server.py'), str(tools)])}\n",
        encoding="utf-8",
    )
    if code := cli("migrate", "--config", str(config)):
        return code
    made = demo_versions(database)
    if made:
        print(f"\n{reuse_line(database, made)}", flush=True)
    for example in EXAMPLES[len(made) :]:
        serve_example(tools, example)
        print(f"\n$ drift-monitor poll   # demo server now serving docs/examples/{example}", flush=True)
        if code := cli("poll", "--config", str(config)):
            return code
    serve_example(tools, EXAMPLES[-1])  # what `serve` polls from now on: the listing of the newest version
    return config


def demo_versions(database: Path) -> list[int]:
    """The demo server's version numbers in the database, oldest first (none on a fresh database)."""
    # The store is imported here, once the lock is held: loading it takes seconds on a busy machine,
    # and a `serve` holding the database is reported before that.
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from monitor.store import make_engine
    from monitor.store.models import Server, Snapshot

    engine = make_engine(database_url(database))
    try:
        with Session(engine) as session:
            query = select(Snapshot.version).join(Server).where(Server.name == DEMO_SERVER)
            return list(session.scalars(query.order_by(Snapshot.version)))
    finally:
        engine.dispose()


def reuse_line(database: Path, versions: list[int]) -> str:
    """One line: what the demo database already holds, and that it is reused as it is."""
    from sqlalchemy import func, select
    from sqlalchemy.orm import Session

    from monitor.core.states import AlertState
    from monitor.store import make_engine
    from monitor.store.models import Alert, Server

    engine = make_engine(database_url(database))
    try:
        with Session(engine) as session:
            query = select(Alert.rule, func.count()).join(Server).where(Server.name == DEMO_SERVER)
            query = query.where(Alert.state != AlertState.RESOLVED.value).group_by(Alert.rule)
            unresolved = {rule: count for rule, count in session.execute(query.order_by(Alert.rule))}
    finally:
        engine.dispose()
    held = ", ".join(f"v{version}" for version in versions)
    alerts = ", ".join(f"{rule}" + (f" x{count}" if count > 1 else "") for rule, count in unresolved.items())
    return (
        f"demo database {database} already holds the demo ({held}; unresolved alerts: {alerts or 'none'}); "
        "reusing it without polling (`deploy/dev.py run --fresh` starts over)"
    )


def serve_example(tools: Path, example: str) -> None:
    """Have the demo server serve `docs/examples/EXAMPLE` (it reads the file at each start)."""
    listing = json.loads((ROOT / "docs" / "examples" / example).read_text(encoding="utf-8"))
    tools.write_text(json.dumps(listing.get("result", listing)["tools"]), encoding="utf-8")


def cli(*args: str) -> int:
    command = [sys.executable, "-m", "monitor.cli", *args]
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def serve(config: Path, port: int) -> int:
    token = os.environ.get("DRIFT_MONITOR_API_TOKEN") or secrets.token_urlsafe(16)
    print(
        f"\n$ drift-monitor serve   # dashboard: http://127.0.0.1:{port}/  (sign in with API token {token})\n"
        "Ctrl-C stops it.",
        flush=True,
    )
    env = {**os.environ, "DRIFT_MONITOR_API_TOKEN": token}
    command = [sys.executable, "-m", "monitor.cli", "serve", "--config", str(config), "--port", str(port)]
    try:
        return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
