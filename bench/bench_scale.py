"""Three `drift-monitor serve` processes on one PostgreSQL database, one SIGKILLed mid-poll: how close
to one poll per interval, and how soon are the dead instance's servers taken over?

tests/test_scale.py asserts what the scheduler guarantees (never a slot claimed or polled twice,
every dead lease taken over after it runs out, no poll while it lasts), whatever the load. This
script measures the timing those tests leave alone, next to what the design aims at:

- the gaps between a server's consecutive polls, against the interval (claims land on 1 s ticks,
  and a busy event loop starts claimed polls later still);
- how late each claim took its slot (claim log: the claiming instance's `now` minus the slot),
  against the 1 s tick;
- how soon after a dead lease ran out a survivor claimed the server, against the 1 s tick;
- the first gap after a takeover, against the 0.9..1.1 intervals a restarted rhythm aims at.

The fleet is one process (`fleet_server.py`, 300 servers of 5 tools), polled every 10 s (30 polls/s:
about one of the two cores). Every claim is logged by a trigger (tests/support/claims.py).

    DRIFT_MONITOR_TEST_PG_URL=postgresql+psycopg://... python bench/bench_scale.py
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import common
from sqlalchemy import create_engine, text
from support import Service, fleet, migrate_config, postgres_schema, wait_until
from support.claims import Claim, claims, freeze_one_polling, install_claim_log

from monitor.collect.scheduler import LEASE_MARGIN
from monitor.store.marks import from_epoch_ms

PG_ENV = "DRIFT_MONITOR_TEST_PG_URL"
SERVERS = 300
INTERVAL = 10.0
TIMEOUT = 5.0
LEASE = timedelta(seconds=TIMEOUT) + LEASE_MARGIN
RUN_BEFORE_KILL = 30.0
"""Seconds of all three instances polling, after every server's first poll, before the kill."""
RUN_AFTER_TAKEOVER = 2.5 * INTERVAL
"""Seconds of the survivors polling on after the last takeover: the restarted rhythms settle."""
TICK = 1.0


def quantiles(values: list[float]) -> str:
    p99 = common.quantile(values, 0.99)
    return (
        f"min {min(values):.2f}, median {statistics.median(values):.2f}, p99 {p99:.2f}, "
        f"max {max(values):.2f} s over {len(values)}"
    )


def run(database_url: str, workdir: Path) -> list[tuple[str, float, float, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFT_MONITOR_")}
    busy_at_start = common.machine_busy()
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        urls = stack.enter_context(fleet(SERVERS, 5)).urls
        config = workdir / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{INTERVAL:g}s"\n'
            f'poll_timeout = "{TIMEOUT:g}s"\n\n'
            + "".join(
                f'[[servers]]\nname = "s{i:03d}"\ntransport = "http"\nurl = "{url}"\n\n'
                for i, url in enumerate(urls)
            )
        )
        migrate_config(config, env)
        engine = create_engine(database_url)
        stack.callback(engine.dispose)
        install_claim_log(engine)
        instances = [stack.enter_context(Service(config, env))]
        instances[0].wait_ready()  # it registers every server; the others find them
        instances += [stack.enter_context(Service(config, env)) for _ in range(2)]
        for instance in instances[1:]:
            instance.wait_ready()

        def count(sql: str) -> int:
            with engine.connect() as connection:
                return int(connection.execute(text(sql)).scalar() or 0)

        wait_until(
            "a first poll of every server",
            lambda: count("select count(distinct server_id) from poll_attempts") == SERVERS,
            timeout=120,
            alive=instances,
        )
        setup = time.monotonic() - began
        time.sleep(RUN_BEFORE_KILL)  # the measurement itself: three instances sharing the work
        victim = freeze_one_polling(engine, instances)
        victim.kill()
        killed_at = datetime.now(UTC)
        survivors = [instance for instance in instances if instance is not victim]
        dead_owner = next(c.owner for c in reversed(claims(engine)) if c.pid == victim.pid)

        def takeovers() -> dict[str, Claim]:
            return {c.server: c for c in claims(engine) if c.previous_owner == dead_owner}

        with engine.connect() as connection:
            orphans = set(
                connection.execute(
                    text("select name from servers where lease_owner = :owner"), {"owner": dead_owner}
                ).scalars()
            )
        wait_until(
            "every dead lease taken over",
            lambda: set(takeovers()) >= orphans,
            timeout=LEASE.total_seconds() + 60,
            alive=survivors,
        )
        time.sleep(RUN_AFTER_TAKEOVER)  # the survivors carry on alone: the restarted rhythms
        codes = [instance.stop() for instance in survivors]
        wall = time.monotonic() - began
        log = claims(engine)
        with engine.connect() as connection:
            attempts = connection.execute(
                text(
                    "select s.name, a.started_at, a.ok from poll_attempts a join servers s "
                    "on s.id = a.server_id order by s.name, a.started_at"
                )
            ).all()
            marks = connection.execute(
                text("select s.name, m.started_ms from poll_marks m join servers s on s.id = m.server_id")
            ).all()
    attempts = sorted([*attempts, *((name, from_epoch_ms(ms), True) for name, ms in marks)])
    busy = [b - a for a, b in zip(busy_at_start, common.machine_busy(), strict=True)]

    by_server: dict[str, list[datetime]] = {}
    for name, started_at, _ in attempts:
        by_server.setdefault(name, []).append(started_at)
    taken = {c.server: c for c in log if c.previous_owner == dead_owner}
    gaps: list[float] = []
    restarts: list[float] = []
    for name, times in by_server.items():
        segments = [times]
        if name in taken:  # the gap across the dead lease is the takeover's, not the rhythm's
            at = taken[name].claimed_at(LEASE)
            later = [t for t in times if t >= at]
            restarts += [(b - a).total_seconds() for a, b in itertools.pairwise(later[:2])]
            segments = [[t for t in times if t < killed_at], later[1:]]
        gaps += [(b - a).total_seconds() for segment in segments for a, b in itertools.pairwise(segment)]
    lags = [(c.claimed_at(LEASE) - c.slot).total_seconds() for c in log if c.previous_owner != dead_owner]
    after_expiry = [
        (c.claimed_at(LEASE) - c.previous_expiry).total_seconds()
        for c in taken.values()
        if c.previous_expiry is not None
    ]
    failed = sum(1 for *_, ok in attempts if not ok)
    print(
        f"3 instances, {SERVERS} servers every {INTERVAL:g} s on PostgreSQL: {len(attempts)} polls "
        f"({failed} failed), {len(log)} claims; setup {setup:.1f} s, whole run {wall:.1f} s; "
        f"survivors' exit codes {codes}"
    )
    print(f"gaps between a server's polls: {quantiles(gaps)} (interval {INTERVAL:g} s)")
    print(f"claim lag behind the slot: {quantiles(lags)} (claims run on {TICK:g} s ticks)")
    print(
        f"the killed instance held {len(orphans)} leases; taken over after they ran out: "
        f"{quantiles(after_expiry)} (lease: poll_timeout {TIMEOUT:g} s + {LEASE_MARGIN.total_seconds():g} s)"
    )
    if restarts:
        print(f"first gap after a takeover: {quantiles(restarts)} (a restarted rhythm: 0.9..1.1 intervals)")
    print(f"the {os.cpu_count()} cores were {busy[0] / busy[1]:.0%} busy over the run (other work included)")
    return [
        ("scale PG: max gap between polls s (base=interval)", max(gaps), INTERVAL, "~1: one per interval"),
        ("scale PG: p99 claim lag s (base=1 s tick)", common.quantile(lags, 0.99), TICK, ">=1: in a tick"),
        ("scale PG: takeover after expiry s (base=1 s tick)", max(after_expiry), TICK, ">=1: in a tick"),
    ]


def main() -> list[tuple[str, float, float, str]]:
    pg_url = os.environ.get(PG_ENV)
    if not pg_url:
        print(f"skipped: several instances share work only on PostgreSQL ({PG_ENV} is not set)")
        return []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, postgres_schema(pg_url, "bench") as url:
        rows = run(url, Path(tmp))
    print(f"benchmark wall time {time.perf_counter() - start:.1f} s (2 shared cores: numbers are noisy)")
    return rows


if __name__ == "__main__":
    for figure, ours, baseline, goal in main():
        print(
            f"{figure}: ours {ours:.2f}, baseline {baseline:.2f}, ratio {baseline / ours:.2f}x, goal {goal}"
        )
