"""Several `serve` processes on one PostgreSQL database share the servers: one poll per server per
interval, also when one of them is SIGKILLed (its servers come back when their leases run out), and
every alert is opened and delivered exactly once."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import server_command
from receiver import Receiver
from sqlalchemy import create_engine, text
from test_service import KEY, SECRET_ENV, Service, environment, events, migrate, tools

FLEET = Path(__file__).resolve().parent.parent / "bench" / "fleet_server.py"
SERVERS = 50
INTERVAL = 3.0
RUN_FOR = 13.0


@contextmanager
def fleet(count: int) -> Iterator[list[str]]:
    """The benchmark's fleet: `count` MCPServer apps on their own 127.0.0.1 ports in one process."""
    process = subprocess.Popen(
        [sys.executable, str(FLEET), "--servers", str(count), "--tools", "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=60)
            if line is None:
                raise RuntimeError("fleet exited before it was ready")
            if line.startswith("READY "):
                yield line.split()[1:]
                return
    finally:
        process.kill()
        process.wait()


def test_two_instances_poll_each_server_once_per_interval(tmp_path: Path, database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share work only on PostgreSQL")
    with fleet(SERVERS) as urls:
        servers = "".join(
            f'[[servers]]\nname = "s{i:02d}"\ntransport = "http"\nurl = "{url}"\n\n'
            for i, url in enumerate(urls)
        )
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{INTERVAL}s"\n'
            f'poll_timeout = "10s"\n\n{servers}'
        )
        env = dict(os.environ)
        migrate(config, env)
        instances = [Service(config, env), Service(config, env)]
        engine = create_engine(database_url)
        polled_by: dict[int, set[str]] = {i.process.pid: set() for i in instances}
        """Servers each instance was seen holding a lease on (polling): the logs do not name them."""
        try:
            started = time.monotonic()
            deadline = started + RUN_FOR
            while time.monotonic() < deadline:
                assert all(i.process.poll() is None for i in instances), instances[0].output()[-3000:]
                with engine.connect() as connection:
                    for name, owner in connection.execute(
                        text("select name, lease_owner from servers where lease_owner is not null")
                    ):
                        polled_by.setdefault(int(owner.rsplit(":", 2)[1]), set()).add(name)
                time.sleep(0.05)  # the run itself is the measurement: two processes polling for 13 s
        finally:
            codes = [instance.stop() for instance in instances]
        assert codes == [0, 0], [i.output()[-2000:] for i in instances]

    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "select s.name, a.started_at, a.ok from poll_attempts a join servers s on s.id = a.server_id "
                "order by s.name, a.started_at"
            )
        ).all()
    engine.dispose()
    by_server: dict[str, list[datetime]] = {}
    for name, started_at, ok in rows:
        assert ok, f"{name} failed a poll"
        by_server.setdefault(name, []).append(started_at)
    assert len(by_server) == SERVERS
    counts = sorted(len(times) for times in by_server.values())
    assert counts[0] >= RUN_FOR / INTERVAL - 1, counts
    gaps = [
        (later - earlier).total_seconds()
        for times in by_server.values()
        for earlier, later in itertools.pairwise(times)
    ]
    # Exactly one poll per interval: never two within one (claims land on one-second ticks, so up to
    # a tick late), and none skipped.
    assert min(gaps) >= INTERVAL - 1.1 and max(gaps) <= INTERVAL + 1.1, (sorted(gaps)[:3], sorted(gaps)[-3:])
    ports = [polled_by[instance.process.pid] for instance in instances]
    assert ports[0] and ports[1], "both instances did part of the work"
    print(
        f"polls per server over {RUN_FOR:.0f} s at {INTERVAL:.0f} s: {counts[0]}..{counts[-1]}; "
        f"smallest gap {min(gaps):.2f} s; servers seen polled by each instance: "
        f"{len(ports[0])}, {len(ports[1])}"
    )


# Issue 6: three instances, one SIGKILLed mid-run.

SCALE_SERVERS = 300
SCALE_INTERVAL = 10.0
"""300 servers every 10 s is 30 polls/s. Measured here, a poll costs about 25 ms of CPU in `serve`
and 10 ms in the fleet, so that is about one of the two cores; at 8 s (37.5/s) and 6 s (50/s) the
machine ran at 95-100 % whenever other test runs shared it, polls fell seconds behind and timed out
(at 4 s, 75/s, it never kept up). 10 s is the shortest interval that leaves a core of margin."""
SCALE_TIMEOUT = 5.0
"""`poll_timeout`: a lease lasts this plus LEASE_MARGIN (30 s), so a killed instance's servers are
taken over 35 s after it claimed them."""
LATENESS = 0.5 * SCALE_INTERVAL
GAPS = (SCALE_INTERVAL - LATENESS, SCALE_INTERVAL + LATENESS)
"""Bounds on the time between a server's consecutive polls. Claims land on one-second ticks and a
loaded event loop starts claimed polls later still: on these shared 2 cores, while instances start
or other test runs take the CPU, polls fall up to ~5 s behind for tens of seconds and then catch
up (a claim moves `next_poll_at` exactly one interval on, so the rhythm holds), which shortens the
gaps after. A doubled claim lands within a tick or two of the first poll, a skipped one two
intervals after: half an interval either way tells them apart from lateness."""
TAKEOVER_SLACK = 3.0
"""How soon after a dead lease runs out a survivor polls the server: its next tick, plus the same
event-loop latency; up to 1.9 s was seen on the shared 2 cores."""
KILL_WAIT = 5.0
"""How long to wait to catch an instance polling one of the servers flipped after the kill."""
FLIPPED_BEFORE = 2
"""Servers whose purge_tenant loses readOnlyHint before the kill (alerts delivered before it)."""
FLIPPED_AFTER = 3
"""Servers flipped right after the kill. The victim is killed while polling one of them if one can
be caught at that within KILL_WAIT: that change is then only seen once the dead lease runs out."""


class Child:
    """A subprocess whose stdout (and stderr) a thread drains, so it never blocks; READY is awaited."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._ready: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("READY "):
                self._ready.put(line.split()[1])
        self._ready.put(None)

    def ready(self, timeout: float = 60.0) -> str:
        try:
            url = self._ready.get(timeout=timeout)
        except queue.Empty:
            url = None
        if url is None:
            raise RuntimeError("no READY line:\n" + self.output()[-3000:])
        return url

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def output(self) -> str:
        return "".join(self.lines)


def drift(times: list[datetime]) -> float:
    """How far a server's polls stray from exactly one per interval: the spread of `t_i - t_0 - i * I`.

    A poll starts a little after its slot (ticks, a busy event loop) but the rhythm never drifts,
    since a claim moves `next_poll_at` by exactly one interval: late polls keep this within the
    lateness. A doubled or skipped poll shifts every later one by a whole interval.
    """
    offsets = [(t - times[0]).total_seconds() - i * SCALE_INTERVAL for i, t in enumerate(times)]
    return max(offsets, default=0.0) - min(offsets, default=0.0)


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values) - values[3] - values[4], sum(values)


def gaps_of(times: list[datetime]) -> list[float]:
    return [round((b - a).total_seconds(), 2) for a, b in itertools.pairwise(times)]


def serve_argv(config: Path) -> list[str]:
    return [sys.executable, "-m", "monitor.cli", "serve", "--config", str(config), "--port", "0"]


def test_three_instances_survive_a_sigkill_without_double_polls_or_lost_alerts(
    tmp_path: Path, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share work only on PostgreSQL")
    began = time.monotonic()
    cpu_at_start = busy_jiffies()
    env = environment()
    flips = [tmp_path / f"flip{i}.json" for i in range(FLIPPED_BEFORE + FLIPPED_AFTER)]
    for path in flips:
        path.write_text(json.dumps(tools(read_only=True)))
    with contextlib.ExitStack() as stack:
        receiver = stack.enter_context(Receiver(KEY))
        flip_servers = []
        for path in flips:  # started together: each takes a second or two to import the SDK
            child = Child(
                [*server_command("fastmcp_server.py", str(path)), "--transport", "http", "--port", "0"]
            )
            stack.callback(child.stop, signal.SIGKILL)
            flip_servers.append(child)
        urls = stack.enter_context(fleet(SCALE_SERVERS))
        flip_urls = [child.ready() for child in flip_servers]
        names = {f"flip{i}": url for i, url in enumerate(flip_urls)}
        names.update({f"s{i:03d}": url for i, url in enumerate(urls)})
        before, after = sorted(names)[:FLIPPED_BEFORE], sorted(names)[FLIPPED_BEFORE : len(flips)]
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{SCALE_INTERVAL:g}s"\n'
            f'poll_timeout = "{SCALE_TIMEOUT:g}s"\n\n'
            + "".join(
                f'[[servers]]\nname = "{n}"\ntransport = "http"\nurl = "{u}"\n\n' for n, u in names.items()
            )
            + f'[[webhooks]]\nname = "ops"\nurl = "{receiver.url}"\nsecret_env = "{SECRET_ENV}"\n'
            'min_severity = "high"\n'
        )
        migrate(config, env)
        engine = create_engine(database_url)
        stack.callback(engine.dispose)

        def query(sql: str, **params: object) -> list[Any]:
            with engine.connect() as connection:
                return list(connection.execute(text(sql), params).all())

        instances: list[Child] = []
        for _ in range(3):
            instances.append(Child(serve_argv(config), env))
            stack.callback(instances[-1].stop)
            if len(instances) == 1:  # the first registers every server, the others find them: started
                instances[0].ready()  # together on an empty database, all but one fail on uq_servers_name
        for instance in instances[1:]:
            instance.ready()
        setup = time.monotonic() - began

        seen: dict[tuple[int, bool], set[str]] = {}
        """(pid, after the kill) -> servers it was seen polling (holding a lease on): the logs do not
        name them. The dead instance's leases stay behind until they run out."""

        def leases() -> dict[str, int]:
            """Servers being polled right now -> the pid of the instance polling them."""
            rows = query("select name, lease_owner from servers where lease_owner is not null")
            return {name: int(owner.rsplit(":", 2)[1]) for name, owner in rows}

        def alive() -> None:
            for name, pid in leases().items():
                seen.setdefault((pid, victim_killed), set()).add(name)
            for instance in instances:
                if not (victim_killed and instance is victim):
                    assert instance.process.poll() is None, instance.output()[-3000:]

        def wait(condition: Any, timeout: float, what: str) -> None:
            deadline = time.monotonic() + timeout
            while not condition():
                alive()
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.1)

        victim_killed = False
        polled = "select count(distinct server_id) from poll_attempts a join servers s on s.id = a.server_id"
        wait(
            lambda: query(polled + " where s.name = any(:n)", n=before)[0][0] == len(before),
            SCALE_INTERVAL + 10,
            "the first polls of the servers to flip",
        )
        for name in before:
            flips[int(name[4:])].write_text(json.dumps(tools(read_only=False)))

        def opened() -> dict[str, list[dict[str, Any]]]:
            found: dict[str, list[dict[str, Any]]] = {}
            for event in events(receiver):
                if event["type"] == "alert.opened":
                    found.setdefault(event["alert"]["server"], []).append(event)
            return found

        wait(lambda: set(before) <= set(opened()), SCALE_INTERVAL + 15, "the alerts of the first flips")
        wait(lambda: query(polled)[0][0] == len(names), SCALE_INTERVAL + 10, "a first poll of every server")
        pending = "select count(*) from webhook_deliveries where state <> 'delivered'"
        wait(lambda: query(pending)[0][0] == 0, 10, "the first alerts' deliveries to be recorded")

        # SIGKILL an instance while it holds leases (polls in flight), on a server flipped next if it
        # can be caught at that; otherwise the one holding the most.
        first_alerts = time.monotonic() - began
        by_pid = {instance.process.pid: instance for instance in instances}
        caught: dict[str, int] = {}
        deadline = time.monotonic() + KILL_WAIT
        while time.monotonic() < deadline + 5:
            caught = leases()
            if set(caught) & set(after) or (caught and time.monotonic() > deadline):
                break
            time.sleep(0.01)
        assert caught, "no instance was seen polling"
        flipping = [caught[name] for name in after if name in caught]
        victim = by_pid[flipping[0] if flipping else Counter(caught.values()).most_common(1)[0][0]]
        victim.process.kill()
        killed_at = datetime.now(UTC)
        kill = time.monotonic() - began
        victim_killed = True
        assert victim.process.wait(timeout=10) == -signal.SIGKILL
        for name in after:
            flips[int(name[4:])].write_text(json.dumps(tools(read_only=False)))
        orphans = dict(
            query(
                "select name, lease_expires_at from servers where lease_owner like :owner",
                owner=f"%:{victim.process.pid}:%",
            )
        )
        assert orphans, f"the victim's polls all finished before the kill: {caught}"
        # Long enough past the last dead lease for every orphan's takeover poll and the one after it.
        end = max(orphans.values()) + timedelta(seconds=1.1 * SCALE_INTERVAL + TAKEOVER_SLACK + 1)
        while datetime.now(UTC) < end:  # the survivors carry on alone: this is the measurement
            alive()
            time.sleep(0.05)
        wait(lambda: set(before + after) <= set(opened()), 15, "the alerts of the later flips")
        time.sleep(1.0)  # a doubled delivery would arrive now
        survivors = [instance for instance in instances if instance is not victim]
        codes = [instance.stop() for instance in survivors]
        assert codes == [0, 0], [i.output()[-2000:] for i in survivors]
        wall = time.monotonic() - began

        attempts = query(
            "select s.name, a.started_at, a.ok from poll_attempts a join servers s on s.id = a.server_id "
            "order by s.name, a.started_at"
        )
        alerts = query(
            "select s.name, a.tool, a.rule, count(*) from alerts a join servers s on s.id = a.server_id "
            "group by s.name, a.tool, a.rule"
        )
        deliveries = dict(query("select state, count(*) from webhook_deliveries group by state"))

    by_server: dict[str, list[datetime]] = {}
    for name, started_at, _ in attempts:
        by_server.setdefault(name, []).append(started_at)
    failed = sum(1 for *_, ok in attempts if not ok)
    gaps: list[float] = []
    drifts: dict[str, float] = {}
    """server -> how far its polls stray from one every interval (see `drift`): their lateness."""
    restarts: list[float] = []
    takeovers: dict[str, tuple[float, float]] = {}
    """orphan -> (takeover poll after the kill, after its lease expired), seconds"""
    for name, times in by_server.items():
        segments = [times]
        if name in orphans:
            # Untouched while its dead lease lasts, taken over about a tick after it expires, then on
            # a fresh rhythm (the claim finds it behind: 0.9..1.1 intervals on, then every interval).
            later = [t for t in times if t >= killed_at]
            segments = [[t for t in times if t < killed_at], later[1:]]
            if len(later) > 1:
                restarts.append((later[1] - later[0]).total_seconds())
            if later:
                takeovers[name] = (
                    (later[0] - killed_at).total_seconds(),
                    (later[0] - orphans[name]).total_seconds(),
                )
        for segment in segments:
            gaps.extend((b - a).total_seconds() for a, b in itertools.pairwise(segment))
            drifts[name] = max(drifts.get(name, 0.0), drift(segment))
    worst = sorted(drifts, key=drifts.__getitem__)[-3:]
    near = sum(1 for gap in gaps if abs(gap - SCALE_INTERVAL) <= 1.5) / len(gaps)
    counts = sorted(len(times) for times in by_server.values())
    since_kill = sorted(t for t, _ in takeovers.values()) or [float("nan")]
    since_expiry = sorted(e for _, e in takeovers.values()) or [float("nan")]
    busy = [b - a for a, b in zip(cpu_at_start, busy_jiffies(), strict=True)]
    load = f"the {os.cpu_count()} cores were {busy[0] / busy[1]:.0%} busy over the test (other work included)"
    print(
        f"\n3 instances, {len(names)} servers at {SCALE_INTERVAL:g} s: {len(attempts)} polls "
        f"({failed} failed), {counts[0]}..{counts[-1]} per server; timeline: setup {setup:.1f} s, "
        f"first alerts {first_alerts:.1f} s, kill {kill:.1f} s, end {wall:.1f} s"
    )
    print(
        f"gaps between a server's polls: {min(gaps):.2f}..{max(gaps):.2f} s over {len(gaps)} gaps, "
        f"{near:.0%} within 1.5 s of the interval; most a server's polls strayed from their rhythm "
        f"{drifts[worst[-1]]:.2f} s; first gap after a takeover "
        f"{min(restarts, default=0):.2f}..{max(restarts, default=0):.2f} s"
    )
    print(
        f"killed instance held {len(orphans)} leases"
        f"{' (one on a server flipped after the kill)' if set(orphans) & set(after) else ''}; "
        f"taken over {since_kill[0]:.1f}..{since_kill[-1]:.1f} s after the kill, "
        f"{since_expiry[0]:.2f}..{since_expiry[-1]:.2f} s after the lease ran out "
        f"(poll_timeout {SCALE_TIMEOUT:g} s + 30 s from the claim)"
    )
    print(
        "servers seen polled by each instance before / after the kill: "
        + ", ".join(
            f"{'killed ' if i is victim else ''}{len(seen.get((i.process.pid, False), ()))} / "
            f"{len(seen.get((i.process.pid, True), ()))}"
            for i in instances
        )
        + f"; deliveries by state: {deliveries}; {load}"
    )

    assert set(by_server) == set(names)
    assert set(takeovers) == set(orphans), f"never polled after the kill: {set(orphans) - set(takeovers)}"
    # Once per interval, always: never two polls in one, none skipped (see GAPS), none while a dead
    # lease lasts, and after a takeover (a fresh rhythm: 0.9..1.1 intervals on) the same again.
    late = {name: gaps_of(by_server[name]) for name in worst}
    assert min(gaps) >= GAPS[0], (late, load)
    assert max(gaps) <= GAPS[1], (late, load)
    assert all(-0.2 <= late <= TAKEOVER_SLACK for _, late in takeovers.values()), takeovers
    assert all(0.9 * SCALE_INTERVAL - 0.2 <= gap <= 1.1 * SCALE_INTERVAL + LATENESS for gap in restarts), (
        restarts,
        load,
    )

    # No alert lost or doubled: one per flipped server in the table, one webhook each, delivered once.
    expected = {(name, "purge_tenant", "read-only-revoked") for name in before + after}
    assert {(n, t, r) for n, t, r, _ in alerts} == expected, alerts
    assert all(count == 1 for *_, count in alerts), alerts
    got = opened()
    assert {name: len(found) for name, found in got.items()} == dict.fromkeys(before + after, 1), got
    assert all(e["alert"]["rule"] == "read-only-revoked" for found in got.values() for e in found)
    assert receiver.delivered and set(receiver.delivered.values()) == {1}, receiver.delivered
    assert deliveries == {"delivered": len(expected)}, deliveries
