"""Several `serve` processes on one PostgreSQL database share the servers: never two polls of a server
in one interval, also when one of them is SIGKILLed (its servers come back when their leases run
out), and every alert is opened and delivered exactly once.

Every claim is logged by the database itself (tests/support/claims.py) and checked against what
the scheduler promises, so these tests hold however busy the machine is: a slow machine polls
late, never twice. How late, and how soon a dead instance's servers are taken over, are figures of
bench/bench_scale.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from support import (
    Process,
    Receiver,
    Service,
    fleet,
    http_server_command,
    migrate_config,
    read_only_flip,
    wait_until,
    webhook_secret,
)
from support.claims import (
    Claim,
    claim_problems,
    claims,
    freeze_one_polling,
    install_claim_log,
    poll_starts,
    query,
    skip_unless_postgresql,
)

from monitor.collect.scheduler import LEASE_MARGIN

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

KEY = b"scale test webhook key"
SECRET_ENV = "TEST_SCALE_WEBHOOK_SECRET"
WAIT = 120.0
"""Upper bound on each wait for the instances to do something; every wait ends at its event."""


def tools(read_only: bool) -> list[dict[str, Any]]:
    return read_only_flip(read_only, description="Remove a tenant's records.")


def write_config(
    path: Path, database_url: str, interval: float, timeout: float, servers: dict[str, str]
) -> Path:
    path.write_text(
        f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{interval:g}s"\n'
        f'poll_timeout = "{timeout:g}s"\n\n'
        + "".join(
            f'[[servers]]\nname = "{n}"\ntransport = "http"\nurl = "{u}"\n\n' for n, u in servers.items()
        )
    )
    return path


# Two instances, 40 servers every 3 s.

SERVERS = 40
INTERVAL = 3.0
TIMEOUT = 10.0
ROUNDS = 3
"""Claims of every server to wait for: several intervals, each server passed between instances."""


@pytest.mark.slow
def test_two_instances_poll_each_server_once_per_interval(tmp_path: Path, database_url: str) -> None:
    """Two instances share 40 servers polled every 3 s until each server has been claimed ROUNDS
    times. Must hold, from the claim log and the poll attempts: every claim took a due slot with no
    live lease on it and moved it one interval on (or restarted the rhythm from now, had the
    instances fallen behind); no slot was claimed twice, nor polled twice; every poll succeeded;
    both instances did part of the work; both stop cleanly on SIGTERM."""
    skip_unless_postgresql(database_url)
    interval, lease = timedelta(seconds=INTERVAL), timedelta(seconds=TIMEOUT) + LEASE_MARGIN
    env = dict(os.environ)
    with contextlib.ExitStack() as stack:
        urls = stack.enter_context(fleet(SERVERS, 5)).urls
        names = {f"s{i:02d}": url for i, url in enumerate(urls)}
        config = write_config(tmp_path / "monitor.toml", database_url, INTERVAL, TIMEOUT, names)
        migrate_config(config, env)
        engine = create_engine(database_url)
        stack.callback(engine.dispose)
        install_claim_log(engine)
        instances = [stack.enter_context(Service(config, env))]
        instances[0].wait_ready()  # it registers every server; the other finds them
        instances.append(stack.enter_context(Service(config, env)))
        instances[1].wait_ready()

        def enough() -> bool:
            log = claims(engine)
            per_server = Counter(claim.server for claim in log)
            owners = {claim.pid for claim in log}
            return len(per_server) == SERVERS and min(per_server.values()) >= ROUNDS and len(owners) == 2

        wait_until(
            f"{ROUNDS} claims of every server by both instances", enough, timeout=WAIT, alive=instances
        )
        codes = [instance.stop() for instance in instances]
        assert codes == [0, 0], [i.tail() for i in instances]
        log = claims(engine)
        starts = poll_starts(engine)
        failed = query(engine, "select count(*) from poll_attempts where not ok")[0][0]

    assert claim_problems(log, starts, interval=interval, lease=lease) == []
    assert set(starts) == set(names) and failed == 0
    claimed_by = Counter(claim.pid for claim in log)
    assert set(claimed_by) == {i.pid for i in instances}, claimed_by
    polls = sorted(len(times) for times in starts.values())
    print(
        f"\n{len(log)} claims, {sum(polls)} polls ({polls[0]}..{polls[-1]} per server); "
        f"claims by instance: {sorted(claimed_by.values())}"
    )


# Three instances, one SIGKILLed while it polls.

SCALE_SERVERS = 60
SCALE_INTERVAL = 10.0
SCALE_TIMEOUT = 5.0
"""`poll_timeout`: a lease lasts this plus LEASE_MARGIN (30 s), so a killed instance's servers are
taken over 35 s after it claimed them."""
FLIPPED_BEFORE = 2
"""Servers whose purge_tenant loses readOnlyHint before the kill (alerts delivered before it)."""
FLIPPED_AFTER = 3
"""Servers flipped right after the kill. The victim is killed while polling one of them if one can
be caught at that within KILL_WAIT: that change is then only seen once the dead lease runs out."""
KILL_WAIT = 10.0
"""How long to try catching an instance polling one of the servers flipped after the kill."""


@pytest.mark.slow
def test_three_instances_survive_a_sigkill_without_double_polls_or_lost_alerts(
    tmp_path: Path, database_url: str
) -> None:
    """Three instances share 65 servers every 10 s; one is SIGKILLed while it polls. Must hold:
    the claim log keeps the scheduler's promise throughout (see test_two_instances...); every lease
    the dead instance held is taken over by a survivor once it has run out, and none of its servers
    is polled while it lasts; every flipped server, before and after the kill, has exactly one
    read-only-revoked alert, one webhook each, delivered exactly once; the survivors stop cleanly."""
    skip_unless_postgresql(database_url)
    interval, lease = timedelta(seconds=SCALE_INTERVAL), timedelta(seconds=SCALE_TIMEOUT) + LEASE_MARGIN
    env = {**os.environ, SECRET_ENV: webhook_secret(KEY)}
    flips = [tmp_path / f"flip{i}.json" for i in range(FLIPPED_BEFORE + FLIPPED_AFTER)]
    for path in flips:
        path.write_text(json.dumps(tools(read_only=True)))
    with contextlib.ExitStack() as stack:
        receiver = stack.enter_context(Receiver(KEY))
        flip_servers = [  # started together: each takes a second or two to import the SDK
            stack.enter_context(
                Process(http_server_command("fastmcp_server.py", str(path)), stderr_to_stdout=False)
            )
            for path in flips
        ]
        urls = stack.enter_context(fleet(SCALE_SERVERS, 5)).urls
        names = {f"flip{i}": server.ready()[0] for i, server in enumerate(flip_servers)}
        names.update({f"s{i:03d}": url for i, url in enumerate(urls)})
        before, after = sorted(names)[:FLIPPED_BEFORE], sorted(names)[FLIPPED_BEFORE : len(flips)]
        config = write_config(tmp_path / "monitor.toml", database_url, SCALE_INTERVAL, SCALE_TIMEOUT, names)
        with config.open("a") as extra:
            extra.write(
                f'[[webhooks]]\nname = "ops"\nurl = "{receiver.url}"\nsecret_env = "{SECRET_ENV}"\n'
                'min_severity = "high"\n'
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

        def polled_ok(servers: list[str]) -> bool:
            found = query(
                engine,
                "select count(distinct s.name) from poll_attempts a join servers s on s.id = a.server_id "
                "where a.ok and s.name = any(:names)",
                names=servers,
            )
            return bool(found[0][0] == len(servers))

        def alerted(servers: list[str]) -> bool:
            return set(servers) <= {
                e["alert"]["server"] for e in receiver.events() if e["type"] == "alert.opened"
            }

        wait_until(
            "the first polls of the servers to flip", lambda: polled_ok(before), timeout=WAIT, alive=instances
        )
        for name in before:
            flips[int(name[4:])].write_text(json.dumps(tools(read_only=False)))
        wait_until("the alerts of the first flips", lambda: alerted(before), timeout=WAIT, alive=instances)
        wait_until(
            "a first poll of every server", lambda: polled_ok(list(names)), timeout=WAIT, alive=instances
        )

        victim = freeze_one_polling(engine, instances, prefer=after, prefer_for=KILL_WAIT, timeout=WAIT)
        assert victim.kill() == -signal.SIGKILL
        survivors = [instance for instance in instances if instance is not victim]
        for name in after:
            flips[int(name[4:])].write_text(json.dumps(tools(read_only=False)))
        # Its leases as the kill left them (a write it had sent as it froze may have freed one).
        held = query(
            engine,
            "select name, lease_owner, lease_expires_at from servers where lease_owner like :owner",
            owner=f"%:{victim.pid}:%",
        )
        assert held, "the victim held no lease at the kill"
        (dead_owner,) = {owner for _, owner, _ in held}
        orphans: dict[str, datetime] = {name: expiry for name, _, expiry in held}

        def taken_over() -> bool:
            return set(orphans) <= {c.server for c in claims(engine) if c.previous_owner == dead_owner}

        wait_until(
            "every dead lease to be taken over",
            taken_over,
            timeout=lease.total_seconds() + WAIT,
            alive=survivors,
        )
        wait_until(
            "the alerts of the later flips", lambda: alerted(before + after), timeout=WAIT, alive=survivors
        )
        pending = "select count(*) from webhook_deliveries where state <> 'delivered'"
        wait_until("every delivery", lambda: query(engine, pending)[0][0] == 0, timeout=WAIT, alive=survivors)
        codes = [instance.stop() for instance in survivors]  # nothing can deliver after this
        assert codes == [0, 0], [i.tail() for i in survivors]

        log = claims(engine)
        starts = poll_starts(engine)
        alerts = query(
            engine,
            "select s.name, a.tool, a.rule, count(*) from alerts a join servers s on s.id = a.server_id "
            "group by s.name, a.tool, a.rule",
        )
        deliveries = dict(query(engine, "select state, count(*) from webhook_deliveries group by state"))

    assert set(starts) == set(names)
    assert claim_problems(log, starts, interval=interval, lease=lease) == []
    # Every dead lease taken over by a survivor, after it ran out (claim_problems checks the "after"),
    # and none of its servers polled between the dead claim and the takeover.
    dead = {claim.server: claim for claim in log if claim.owner == dead_owner}
    """Each server's last claim by the killed instance."""
    takeovers: dict[str, Claim] = {}
    for claim in log:
        if claim.previous_owner == dead_owner:
            takeovers.setdefault(claim.server, claim)
    assert set(takeovers) == set(orphans), set(orphans) ^ set(takeovers)
    for name, claim in takeovers.items():
        assert claim.previous_expiry == orphans[name] == dead[name].lease_expires_at, (claim, dead[name])
        claimed, taken = dead[name].claimed_at(lease), claim.claimed_at(lease)
        between = [at for at in starts[name] if claimed <= at < taken]
        assert between == [], (name, "polled while the dead instance's lease lasted", between)

    # No alert lost or doubled: one per flipped server in the table, one webhook each, delivered once.
    expected = {(name, "purge_tenant", "read-only-revoked") for name in before + after}
    assert {(n, t, r) for n, t, r, _ in alerts} == expected, alerts
    assert all(count == 1 for *_, count in alerts), alerts
    opened = Counter(e["alert"]["server"] for e in receiver.events() if e["type"] == "alert.opened")
    assert opened == Counter(before + after), opened
    assert receiver.delivered and set(receiver.delivered.values()) == {1}, receiver.delivered
    assert deliveries == {"delivered": len(expected)}, deliveries
    polls = sum(len(times) for times in starts.values())
    flipped = " (one on a server flipped after the kill)" if set(orphans) & set(after) else ""
    print(
        f"\n{len(log)} claims, {polls} polls of {len(names)} servers; "
        f"the killed instance held {len(orphans)} leases{flipped}, all taken over"
    )
