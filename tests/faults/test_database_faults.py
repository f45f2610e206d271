"""The database failing under a running poller: PostgreSQL restarted, a SQLite disk full or read-only.

What must hold: the failed write is reported (an exception to the caller, the scheduler's log
line), never half-applied; the same process, engine and poller carry on once the database is back
(no restart of their own); and SQLite's file passes `PRAGMA integrity_check` afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.exc import OperationalError
from support import free_port, http_server, numbered_tools, poll_history

from monitor.collect import scheduler as scheduler_module
from monitor.collect.poller import Job, Poller
from monitor.collect.scheduler import LeaseRelease, Scheduler
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import PollOutcome, Store, make_engine, migrate
from monitor.store.models import Listing, Server, Snapshot

PG_URL = os.environ.get("DRIFT_MONITOR_TEST_PG_URL")
PG_CTL_TIMEOUT = 60.0
WAIT = 60.0
"""Upper bound on any one wait for the system to do something; each wait ends at the event."""


def tools(description: str) -> list[dict[str, Any]]:
    return numbered_tools(3, "tool{}", description=description, read_only=True)


class Watched(Poller):
    """The real poller, reporting each poll's end (outcome or exception) to the test as it happens."""

    def __init__(self, store: Store, config: Config) -> None:
        super().__init__(store, config)
        self.successes: list[float] = []
        self.failures: list[tuple[float, BaseException]] = []
        self.changed = asyncio.Event()

    async def poll_one(self, job: Job) -> PollOutcome:
        try:
            outcome = await super().poll_one(job)
        except Exception as exc:
            self.failures.append((time.monotonic(), exc))
            self.changed.set()
            raise
        if outcome.ok:
            self.successes.append(time.monotonic())
        self.changed.set()
        return outcome

    async def until(self, what: str, predicate: Any) -> None:
        deadline = time.monotonic() + WAIT
        while not predicate():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {what} within {WAIT} s")
            try:
                await asyncio.wait_for(self.changed.wait(), remaining)
            except TimeoutError:
                raise AssertionError(f"no {what} within {WAIT} s") from None


# --- PostgreSQL restarted while the scheduler polls ------------------------------------------------


class HoldWrite:
    """Poll hook: once armed, holds the next poll's write transaction open (after its first
    statements) until released, so the database can be stopped under a write in flight."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.armed = threading.Event()
        self.release = threading.Event()
        self.holding = asyncio.Event()

    def after_poll(self, session: Any, poll: Any) -> None:
        if self.armed.is_set():
            self.armed.clear()
            self.loop.call_soon_threadsafe(self.holding.set)
            self.release.wait(WAIT)


def _pg_ctl(cluster: list[str], action: str) -> subprocess.CompletedProcess[str]:
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action]
    if action == "stop":
        command += ["-m", "fast"]
    return subprocess.run(command, capture_output=True, text=True, timeout=PG_CTL_TIMEOUT, check=False)


def _installed_version() -> str | None:
    """A PostgreSQL major version whose clusters `pg_createcluster` can make here, if any."""
    tools = ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster", "pg_lsclusters")
    if not PG_URL or os.geteuid() != 0 or any(shutil.which(tool) is None for tool in tools):
        return None
    listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=False)
    versions = [line.split()[0] for line in listing.stdout.splitlines() if line.strip()]
    return versions[0] if versions else None


@pytest.fixture
def pg_cluster() -> Iterator[tuple[list[str], str]]:
    """A throwaway PostgreSQL cluster of the test's own on a free port, and a URL for it: stopping it
    disturbs no other test, nor another run of the suite sharing the machine's PostgreSQL. Dropped
    when the test ends, whatever happened."""
    version = _installed_version()
    if version is None:
        pytest.skip(
            "needs DRIFT_MONITOR_TEST_PG_URL, root and Debian's pg_createcluster for a cluster to restart"
        )
    cluster, port = [version, f"drift_restart_{uuid.uuid4().hex[:8]}"], free_port()
    created = subprocess.run(
        ["pg_createcluster", *cluster, "--port", str(port), "--start", "--", "--auth=trust"],
        capture_output=True,
        text=True,
        timeout=PG_CTL_TIMEOUT,
        check=False,
    )
    try:
        assert created.returncode == 0, created.stderr
        yield cluster, f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            ["pg_dropcluster", "--stop", *cluster], capture_output=True, timeout=PG_CTL_TIMEOUT, check=False
        )


async def test_postgresql_restart_while_the_scheduler_polls(
    pg_cluster: tuple[list[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service's own loop (APScheduler ticks claiming through the database, polls, writes) runs
    while PostgreSQL stops (fast: sessions terminated) under a poll's open write transaction, then
    starts again. Must hold: the poll whose write hit the outage is reported
    (logged by the scheduler with the database error) and does not stop the loop; once PostgreSQL is
    back, polls succeed again in the same process on the same engine (pool_pre_ping drops the dead
    connections); every recorded poll is whole: the version's poll count equals the successful
    attempts, and the failed write left nothing."""
    # A poll whose write failed keeps its lease until it runs out (the database was down, so it
    # could not be freed): poll_timeout + LEASE_MARGIN. A short margin keeps the test short.
    monkeypatch.setattr(scheduler_module, "LEASE_MARGIN", timedelta(seconds=1))
    caplog.set_level(logging.INFO)
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools("Steady.")), encoding="utf-8")
    cluster, database_url = pg_cluster
    engine = make_engine(database_url)
    try:
        migrate(engine)
        owner = "restart-test"
        hold = HoldWrite(asyncio.get_running_loop())
        store = Store(engine, attempts_kept=1000, hooks=[LeaseRelease(owner), hold])
        with http_server("fastmcp_server.py", str(tools_file)) as url:
            config = Config(
                monitor=MonitorSettings(database_url=database_url, poll_interval=0.3, poll_timeout=2.0),
                servers=[ServerConfig(name="steady", transport="http", url=url)],
            )
            poller = Watched(store, config)
            scheduler = Scheduler(store, poller, config, owner, tick_seconds=0.1)
            scheduler.register(datetime.now(UTC))
            scheduler.start()
            try:
                await poller.until("first successful poll", lambda: len(poller.successes) >= 1)
                hold.armed.set()
                await asyncio.wait_for(hold.holding.wait(), WAIT)  # a poll's write is in flight
                try:
                    stopped = await asyncio.to_thread(_pg_ctl, cluster, "stop")
                    hold.release.set()
                    assert stopped.returncode == 0, stopped.stderr
                    await poller.until("failed write while PostgreSQL is down", lambda: poller.failures)
                finally:
                    hold.release.set()
                    started = await asyncio.to_thread(_pg_ctl, cluster, "start")
                assert started.returncode == 0, started.stderr
                back = time.monotonic()
                await poller.until(
                    "successful poll after the restart", lambda: any(t > back for t in poller.successes)
                )
            finally:
                await scheduler.stop()
                poller.close()

        assert all(isinstance(exc, OperationalError) for _, exc in poller.failures), poller.failures
        reported = [r for r in caplog.records if r.getMessage() == "poll of steady failed unexpectedly"]
        assert reported and all(r.exc_info and r.exc_info[0] is OperationalError for r in reported)
        with store.sessions() as session:
            server = session.scalars(select(Server)).one()
            (snapshot,) = session.scalars(select(Snapshot))
            history = poll_history(session)
            ok_attempts = sum(1 for _, ok, _ in history if ok)
            failed_attempts = sum(1 for _, ok, _ in history if not ok)
        assert snapshot.version == 1 and snapshot.poll_count == ok_attempts and (ok_attempts or 0) >= 2
        assert failed_attempts == 0 and server.consecutive_failures == 0  # the outage wrote nothing
        assert server.last_error is None and server.lease_owner is None
    finally:
        engine.dispose()


# --- SQLite: disk full, read-only ------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, where one can be mounted (root in a container that allows it); skipped elsewhere."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def _fill(folder: Path) -> Path:
    """Write a file until the filesystem has no space left; returns it, for freeing the space later."""
    filler = folder / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb") as handle:
        for _ in range(100_000):  # bounded: 6 GB, far beyond any tmpfs this test mounts
            try:
                handle.write(chunk)
                handle.flush()
            except OSError:
                break
    return filler


def _integrity(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        connection.close()


def _page_cap(engine: Engine, database: Path) -> Callable[[], None]:
    """Cap the database near its current size, as a full disk would (SQLite reports the same
    SQLITE_FULL); returns the function that lifts the cap."""
    pages = _pages(database) + 2

    def cap(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    event.listen(engine, "connect", cap)
    engine.dispose()  # pooled connections reopen with the cap

    def lift() -> None:
        event.remove(engine, "connect", cap)
        engine.dispose()

    return lift


def _pages(database: Path) -> int:
    connection = sqlite3.connect(database)
    try:
        return int(connection.execute("PRAGMA page_count").fetchone()[0])
    finally:
        connection.close()


def _counts(store: Store) -> tuple[int, int, int]:
    with store.sessions() as session:
        return (
            session.scalar(select(func.count()).select_from(Snapshot)) or 0,
            session.scalar(select(func.count()).select_from(Listing)) or 0,
            len(poll_history(session)),
        )


@pytest.mark.parametrize("how", ["tmpfs", "page-cap"])
async def test_sqlite_disk_full(how: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A new, larger version arrives when the SQLite disk is full (a real full tmpfs, or SQLite's own
    page cap where no tmpfs can be mounted). Must hold: the poll's write fails with SQLite's
    "database or disk is full", recorded as a `storage` failure when that small row still fits and
    raised to the caller otherwise; nothing of the new version is stored; the file passes
    integrity_check; and once there is room the same poller stores the new version."""
    folder = request.getfixturevalue("tiny_disk") if how == "tmpfs" else tmp_path
    database = folder / "monitor.db"
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools("Small.")), encoding="utf-8")
    engine = make_engine(f"sqlite:///{database}")
    try:
        migrate(engine)
        store = Store(engine)
        with http_server("fastmcp_server.py", str(tools_file)) as url:
            config = Config(
                monitor=MonitorSettings(poll_timeout=10.0),
                servers=[ServerConfig(name="grows", transport="http", url=url)],
            )
            poller = Poller(store, config)
            try:
                jobs = poller.jobs()
                (first,) = await poller.poll(jobs)
                assert first.ok and first.version == 1
                before = _counts(store)
                tools_file.write_text(json.dumps(tools("L" * 400_000)), encoding="utf-8")  # ~1.2 MB
                make_room: Callable[[], object] = (
                    _fill(folder).unlink if how == "tmpfs" else _page_cap(engine, database)
                )
                failures_recorded = 0
                try:
                    (refused,) = await poller.poll(jobs)
                except OperationalError as exc:  # not even the failure fitted
                    assert "database or disk is full" in str(exc)
                else:  # the small failed-poll row fitted where the version did not
                    assert (refused.ok, refused.error_kind) == (False, "storage"), refused
                    assert refused.error is not None and "database or disk is full" in refused.error
                    failures_recorded = 1
                make_room()
                assert _integrity(database) == "ok"
                assert _counts(store) == (before[0], before[1], before[2] + failures_recorded)
                (after,) = await poller.poll(jobs)
            finally:
                poller.close()
        assert after.ok and after.version == 2 and after.new_version
        assert _counts(store) == (before[0] + 1, before[1] + 1, before[2] + failures_recorded + 1)
    finally:
        engine.dispose()
    assert _integrity(database) == "ok"


def _read_only(folder: Path, database: Path) -> Callable[[], Any]:
    """Make the database unwritable: remount its tmpfs read-only, or chmod where that binds (not root)."""
    if os.geteuid() == 0:
        remounted = subprocess.run(
            ["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True, check=False
        )
        assert remounted.returncode == 0, remounted.stderr
        return lambda: subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
    paths = [p for p in (database, *folder.glob(database.name + "-*")) if p.exists()]
    for path in paths:
        path.chmod(0o444)
    folder.chmod(0o555)

    def restore() -> None:
        folder.chmod(0o755)
        for path in paths:
            path.chmod(0o644)

    return restore


async def test_sqlite_read_only(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The SQLite database becomes read-only under a running poller. Must hold: the poll's write
    fails with SQLite's read-only error, reported to the caller, with nothing stored; made writable
    again, the file passes integrity_check and the same poller records the next poll."""
    folder = request.getfixturevalue("tiny_disk") if os.geteuid() == 0 else tmp_path / "db"
    folder.mkdir(exist_ok=True)
    database = folder / "monitor.db"
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools("Fixed.")), encoding="utf-8")
    engine = make_engine(f"sqlite:///{database}")
    try:
        migrate(engine)
        store = Store(engine)
        with http_server("fastmcp_server.py", str(tools_file)) as url:
            config = Config(
                monitor=MonitorSettings(poll_timeout=10.0),
                servers=[ServerConfig(name="steady", transport="http", url=url)],
            )
            poller = Poller(store, config)
            try:
                jobs = poller.jobs()
                (first,) = await poller.poll(jobs)
                assert first.ok
                before = _counts(store)
                engine.dispose()  # the read-only state is met by fresh connections, as after a restart
                restore = _read_only(folder, database)
                try:
                    with pytest.raises(OperationalError, match=r"readonly database|unable to open database"):
                        await poller.poll(jobs)
                finally:
                    restore()
                engine.dispose()
                assert _integrity(database) == "ok"
                assert _counts(store) == before
                (after,) = await poller.poll(jobs)
            finally:
                poller.close()
        assert after.ok and after.version == 1 and not after.new_version
        assert _counts(store) == (before[0], before[1], before[2] + 1)
    finally:
        engine.dispose()
    assert _integrity(database) == "ok"
