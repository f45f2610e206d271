"""Two `serve` processes on one PostgreSQL database share one fleet while both run flat out: more
servers are due than either instance has poll slots for, so each refills its slots as every poll
ends (`Scheduler.tick` on a backlog) and the two race for the same due rows all the time, in both
lanes (answering servers, and failing ones), while one server's listing changes between polls.

Asserted from the database (the claim log, tests/support/claims.py, and every recorded poll): no
slot claimed twice, none polled twice, no claim under another instance's live lease; each instance
did part of the work; every changed listing was stored as one new version, whoever polled it. How
many polls a second one and two instances do is a figure of bench/bench_fleet.py, not a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from support import (
    Process,
    Service,
    http_server_command,
    migrate_config,
    raw_fleet,
    read_only_flip,
    wait_until,
)
from support.claims import (
    claim_problems,
    claims,
    install_claim_log,
    poll_starts,
    query,
    skip_unless_postgresql,
)

from monitor.collect.scheduler import LEASE_MARGIN

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

SERVERS = 40
FAILING = 3
INTERVAL = 2.0
TIMEOUT = 5.0
SLOTS = 2
"""`poll_concurrency` (and `suspect_poll_concurrency`) of each instance: far fewer than the servers
due in an interval, so the instances claim on every poll's end, not once a tick."""
ROUNDS = 4
"""Claims of every server to wait for."""
FLIPS = 3
"""Changes of the changing server's listing, each made once a poll has seen the one before."""
WAIT = 180.0
"""Upper bound on each wait; every wait ends at its event."""


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def versions(engine: Engine, name: str) -> int:
    found = query(
        engine,
        "select count(*) from snapshots v join servers s on s.id = v.server_id where s.name = :n",
        n=name,
    )
    return int(found[0][0])


@pytest.mark.slow
def test_two_instances_running_flat_out_never_poll_a_slot_twice(tmp_path: Path, database_url: str) -> None:
    skip_unless_postgresql(database_url)
    interval, lease = timedelta(seconds=INTERVAL), timedelta(seconds=TIMEOUT) + LEASE_MARGIN
    env = dict(os.environ)
    listing = tmp_path / "changing.json"
    listing.write_text(json.dumps(read_only_flip(True)))
    with contextlib.ExitStack() as stack:
        changing = stack.enter_context(
            Process(http_server_command("fastmcp_server.py", str(listing)), stderr_to_stdout=False)
        )
        urls = stack.enter_context(raw_fleet(SERVERS)).urls
        dead = f"http://127.0.0.1:{closed_port()}/mcp"
        names = {f"s{i:02d}": url for i, url in enumerate(urls)}
        names |= {f"dead{i}": dead for i in range(FAILING)}
        names["changing"] = changing.ready()[0]
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{INTERVAL:g}s"\n'
            f'poll_timeout = "{TIMEOUT:g}s"\npoll_concurrency = {SLOTS}\n'
            f"suspect_poll_concurrency = {SLOTS}\n\n"
            + "".join(
                f'[[servers]]\nname = "{n}"\ntransport = "http"\nurl = "{u}"\n\n' for n, u in names.items()
            )
        )
        migrate_config(config, env)
        engine = create_engine(database_url)
        stack.callback(engine.dispose)
        install_claim_log(engine)
        instances = [Service(config, env) for _ in range(2)]  # started at once: both register the fleet
        for instance in instances:
            stack.enter_context(instance)
        for instance in instances:
            instance.wait_ready()

        for flip in range(FLIPS):  # each change once the previous listing has been stored
            stored = flip + 1
            wait_until(
                f"version {stored} of the changing server",
                lambda: versions(engine, "changing") >= stored,  # noqa: B023 (called before the loop goes on)
                timeout=WAIT,
                alive=instances,
            )
            listing.write_text(json.dumps(read_only_flip(flip % 2 == 1)))

        def enough() -> bool:
            log = claims(engine)
            per_server = Counter(claim.server for claim in log)
            return (
                len(per_server) == len(names)
                and min(per_server.values()) >= ROUNDS
                and len({claim.pid for claim in log}) == 2
                and versions(engine, "changing") == FLIPS + 1
            )

        wait_until(
            f"{ROUNDS} claims of every server, by both instances", enough, timeout=WAIT, alive=instances
        )
        codes = [instance.stop() for instance in instances]
        assert codes == [0, 0], [instance.tail() for instance in instances]
        log = claims(engine)
        starts = poll_starts(engine)
        outcomes = dict(
            query(
                engine,
                "select s.name like 'dead%', count(*) from poll_attempts a "
                "join servers s on s.id = a.server_id "
                "where not a.ok group by 1",
            )
        )

    assert claim_problems(log, starts, interval=interval, lease=lease) == []
    assert set(starts) == set(names)
    assert outcomes.get(False, 0) == 0 and outcomes.get(True, 0) >= FAILING * (ROUNDS - 1), outcomes
    by_instance = Counter(claim.pid for claim in log)
    assert set(by_instance) == {instance.pid for instance in instances}, by_instance
    print(
        f"\n{len(log)} claims, {sum(map(len, starts.values()))} polls; "
        f"claims by instance {sorted(by_instance.values())}"
    )
