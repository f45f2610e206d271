"""Every claim of a server by a `serve` instance on PostgreSQL, logged by the database itself.

Claiming a server (`Scheduler.claim`) takes a lease on its row and moves its `next_poll_at` one
interval on, in one UPDATE. `install_claim_log` puts a trigger on the servers table of a test's own
schema that copies each such UPDATE into a `claim_log` table: the slot claimed (the old
`next_poll_at`), the next one, the new lease and the lease it replaced. The service is unchanged,
and the log is read afterwards, so what it shows does not depend on how busy the machine was:
`claim_problems` checks it against what the scheduler promises. `freeze_one_polling` catches an
instance with polls in flight, for a SIGKILL that leaves its leases behind.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from monitor.store.marks import from_epoch_ms
from support.processes import wait_until
from support.service import Service

INSTALL = [
    """CREATE TABLE claim_log (
        id bigserial PRIMARY KEY,
        server_id integer NOT NULL,
        slot timestamptz,
        next_slot timestamptz,
        owner text NOT NULL,
        lease_expires_at timestamptz NOT NULL,
        previous_owner text,
        previous_expiry timestamptz
    )""",
    """CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        INSERT INTO claim_log (server_id, slot, next_slot, owner, lease_expires_at, previous_owner,
                               previous_expiry)
        VALUES (NEW.id, OLD.next_poll_at, NEW.next_poll_at, NEW.lease_owner, NEW.lease_expires_at,
                OLD.lease_owner, OLD.lease_expires_at);
        RETURN NEW;
    END $$""",
    # A claim sets a new lease; freeing a lease (NULL) or any other update of the row is not one.
    """CREATE TRIGGER log_claims AFTER UPDATE ON servers FOR EACH ROW
        WHEN (NEW.lease_owner IS NOT NULL AND NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at)
        EXECUTE FUNCTION log_claim()""",
]
SLACK = timedelta(milliseconds=1)
"""Rounding of `interval * random.uniform(0.9, 1.1)` to whole microseconds."""


@dataclass(frozen=True)
class Claim:
    id: int
    server: str
    slot: datetime
    """The `next_poll_at` this claim took: the poll it stands for was due then."""
    next_slot: datetime
    owner: str
    """The instance (`host:pid:random`) that claimed."""
    lease_expires_at: datetime
    previous_owner: str | None
    previous_expiry: datetime | None

    def claimed_at(self, lease: timedelta) -> datetime:
        """The claiming instance's `now`: its lease runs `lease` (poll_timeout + LEASE_MARGIN) from it."""
        return self.lease_expires_at - lease

    @property
    def pid(self) -> int:
        return int(self.owner.rsplit(":", 2)[1])


def install_claim_log(engine: Engine) -> None:
    """Log every claim from now on. The servers table must exist (migrate first)."""
    with engine.begin() as connection:
        for statement in INSTALL:
            connection.execute(text(statement))


def claims(engine: Engine) -> list[Claim]:
    """Every claim so far, in the order they were made (per server, the order they committed)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT c.id, s.name, c.slot, c.next_slot, c.owner, c.lease_expires_at, c.previous_owner, "
                "c.previous_expiry FROM claim_log c JOIN servers s ON s.id = c.server_id ORDER BY c.id"
            )
        ).all()
    return [Claim(*row) for row in rows]


def claim_problems(
    log: Iterable[Claim],
    polls: dict[str, list[datetime]],
    *,
    interval: timedelta,
    lease: timedelta,
) -> list[str]:
    """What in the claim log, and in the polls' start times by server, breaks the scheduler's promise:

    - a server is claimed only once due (`slot <= now`), and only when no live lease is held on it;
    - a claim moves the server's slot exactly one interval on, or, when even that is already past
      (the instances fell behind), 0.9 to 1.1 intervals from now: so a server's claimed slots only
      ever increase, and no slot is claimed twice;
    - every poll follows a claim, and no claim stands for two polls: each slot is polled at most once.
    """
    problems: list[str] = []
    by_server: dict[str, list[Claim]] = {}
    for claim in log:
        by_server.setdefault(claim.server, []).append(claim)
        now = claim.claimed_at(lease)
        where = f"{claim.server}: claim {claim.id} by {claim.owner} at {now.isoformat()}"
        if claim.slot > now:
            problems.append(f"{where} took slot {claim.slot.isoformat()} before it was due")
        if claim.previous_owner is not None and (
            claim.previous_expiry is None or claim.previous_expiry >= now
        ):
            problems.append(f"{where} while {claim.previous_owner}'s lease ran to {claim.previous_expiry}")
        behind = claim.slot + interval <= now
        if not behind and claim.next_slot != claim.slot + interval:
            problems.append(f"{where} moved slot {claim.slot} to {claim.next_slot}, not one interval on")
        if behind and not (now + 0.9 * interval - SLACK <= claim.next_slot <= now + 1.1 * interval + SLACK):
            problems.append(f"{where} restarted the rhythm at {claim.next_slot}, not 0.9..1.1 intervals on")
    for server, taken in by_server.items():
        slots = [claim.slot for claim in taken]
        if slots != sorted(set(slots)):
            problems.append(f"{server}: slots claimed out of order or twice: {slots}")
    for server, started in polls.items():
        starts = [claim.claimed_at(lease) for claim in by_server.get(server, [])]
        polled: dict[int, datetime] = {}
        for at in sorted(started):
            index = max((i for i, claimed in enumerate(starts) if claimed <= at), default=None)
            if index is None:
                problems.append(f"{server}: a poll at {at.isoformat()} before any claim")
            elif index in polled:
                problems.append(f"{server}: polls at {polled[index]} and {at} for one claimed slot")
            else:
                polled[index] = at
    return problems


def skip_unless_postgresql(database_url: str) -> None:
    """Skip a test of several instances on a SQLite database (it allows one instance)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share work only on PostgreSQL")


def query(engine: Engine, sql: str, **params: object) -> list[Any]:
    """The rows of one SQL query."""
    with engine.connect() as connection:
        return list(connection.execute(text(sql), params).all())


def poll_starts(engine: Engine) -> dict[str, list[datetime]]:
    """Server name -> when each of its recorded polls started (full attempt rows and compact marks)."""
    starts: dict[str, list[datetime]] = {}
    for name, started_at in query(
        engine, "select s.name, a.started_at from poll_attempts a join servers s on s.id = a.server_id"
    ):
        starts.setdefault(name, []).append(started_at)
    for name, started_ms in query(
        engine, "select s.name, m.started_ms from poll_marks m join servers s on s.id = m.server_id"
    ):
        starts.setdefault(name, []).append(from_epoch_ms(started_ms))
    return {name: sorted(times) for name, times in starts.items()}


def leases(engine: Engine) -> dict[str, int]:
    """Servers being polled right now -> the pid of the instance polling them (holding the lease)."""
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT name, lease_owner FROM servers WHERE lease_owner IS NOT NULL"))
        return {name: int(owner.rsplit(":", 2)[1]) for name, owner in rows}


def freeze_one_polling(
    engine: Engine,
    instances: Sequence[Service],
    *,
    prefer: Sequence[str] = (),
    prefer_for: float = 0.0,
    timeout: float = 120.0,
) -> Service:
    """Freeze (SIGSTOP) an instance while it holds leases, polls in flight: one polling a `prefer`
    server if one is caught at that within `prefer_for` seconds, else the one holding the most.
    Frozen, it cannot finish those polls, so a SIGKILL now leaves its leases behind, as a crash
    mid-poll would."""
    by_pid = {instance.pid: instance for instance in instances}
    began = time.monotonic()

    def frozen() -> Service | None:
        held = leases(engine)
        wanted = [pid for name, pid in held.items() if name in prefer]
        if not wanted and time.monotonic() - began < prefer_for:
            return None
        candidates = wanted or [pid for pid, _ in Counter(held.values()).most_common(1)]
        if not candidates:
            return None
        victim = by_pid[candidates[0]]
        os.kill(victim.pid, signal.SIGSTOP)
        if victim.pid in leases(engine).values():
            return victim
        os.kill(victim.pid, signal.SIGCONT)  # its polls had all just finished: try again
        return None

    return wait_until("an instance holding leases", frozen, timeout=timeout, every=0.01, alive=instances)
