"""`drift-monitor prune`: old poll attempts and finished deliveries go, in batches; the history stays.

Runs on SQLite and (when configured) PostgreSQL through the `engine` and `database_url` fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from support import read_only_flip, record_poll, tool

from monitor.cli import main
from monitor.config import ServerConfig
from monitor.store import Store, make_engine, migrate, prune_poll_attempts
from monitor.store.models import (
    Alert,
    AlertFinding,
    Base,
    DeliveryAttempt,
    FindingRecord,
    Listing,
    ListingTool,
    PollAttempt,
    PollMark,
    Server,
    Snapshot,
    ToolDefinition,
    WebhookDelivery,
)
from monitor.store.registration import sync_servers

NOW = datetime.now(UTC).replace(microsecond=0)
OLD = NOW - timedelta(days=40)
RECENT = NOW - timedelta(days=1)
CUTOFF = NOW - timedelta(days=30)

KEPT_TABLES: tuple[type[Base], ...] = (
    Server,
    ToolDefinition,
    Listing,
    ListingTool,
    Snapshot,
    FindingRecord,
    Alert,
    AlertFinding,
)
"""Everything prune must leave exactly as it was."""


def count(engine: Engine, model: type[Base]) -> int:
    with engine.connect() as connection:
        return int(connection.scalar(select(func.count()).select_from(model)) or 0)


def rows(engine: Engine, model: type[Base]) -> list[tuple[Any, ...]]:
    """Every row of a table, every column, in primary-key order."""
    table = Base.metadata.tables[model.__tablename__]
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(select(table).order_by(*table.primary_key.columns))]


def history(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    return {model.__tablename__: rows(engine, model) for model in KEPT_TABLES}


def tools(read_only: bool) -> list[dict[str, Any]]:
    fetch = tool("fetch", description="Fetch.", read_only=True)
    return read_only_flip(read_only, "search", description="Search.", others=[fetch])


@dataclass
class Seeded:
    """What `seed` wrote, and what a prune at CUTOFF must delete."""

    old_attempts: int
    recent_attempts: int
    old_deliveries: int
    old_delivery_attempts: int
    kept_deliveries: set[str]


def seed(engine: Engine) -> Seeded:
    """Two versions with findings, an alert, poll attempts and deliveries on both sides of CUTOFF."""
    store = Store(engine, attempts_kept=1000, unreachable_after=3)
    server_id = sync_servers(
        store, [ServerConfig(name="s", transport="http", url="http://127.0.0.1:9/mcp")], OLD
    )["s"]
    at = OLD
    for i in range(8):  # version 1, then the read-only flip: version 2 with a critical finding
        record_poll(store, server_id, tools(read_only=i < 4), at)
        at += timedelta(minutes=1)
    for _ in range(5):  # three in a row raise server-unreachable: a finding from a failure
        store.record_failure(server_id, "timeout", "no answer", started_at=at, finished_at=at)
        at += timedelta(minutes=1)
    for i in range(3):
        at = RECENT + timedelta(minutes=i)
        record_poll(store, server_id, tools(read_only=False), at)
    store.record_failure(server_id, "connect", "refused", started_at=RECENT, finished_at=RECENT)
    with store.sessions.begin() as session:
        # An attempt recorded late: an old start with a higher id than recent ones, so the batches
        # must select by time, not by assuming ids follow time.
        session.add(
            PollAttempt(
                server_id=server_id, started_at=OLD, duration_ms=30_000.0, ok=False, error_kind="timeout"
            )
        )
        finding = session.scalars(
            select(FindingRecord).where(FindingRecord.rule == "read-only-revoked")
        ).one()
        alert = Alert(
            server_id=server_id,
            rule=finding.rule,
            severity=finding.severity,
            severity_rank=finding.severity_rank,
            tool=finding.tool,
            state="resolved",
            open_key=None,
            message=finding.message,
            opened_at=OLD,
            last_seen_at=OLD,
            resolved_at=OLD,
        )
        session.add(alert)
        session.flush()
        session.add(AlertFinding(alert_id=alert.id, finding_id=finding.id))

        def delivery(name: str, state: str, *, created: datetime, attempts: int, **extra: Any) -> None:
            session.add(
                WebhookDelivery(
                    id=name,
                    webhook="ops",
                    alert_id=alert.id,
                    event_type="alert.opened",
                    body="{}",
                    state=state,
                    created_at=created,
                    next_attempt_at=created,
                    expires_at=extra.pop("expires_at", created + timedelta(hours=24)),
                    attempts=attempts,
                    **extra,
                )
            )
            session.flush()
            for n in range(attempts):
                session.add(
                    DeliveryAttempt(
                        delivery_id=name,
                        attempted_at=created + timedelta(seconds=n),
                        status_code=500 if n < attempts - 1 or state != "delivered" else 200,
                        latency_ms=12.0,
                        error=None,
                    )
                )

        for i in range(5):  # delivered long ago: pruned with their attempts
            delivery(f"msg_old_delivered_{i}", "delivered", created=OLD, attempts=2, delivered_at=OLD)
        delivery("msg_old_expired", "expired", created=OLD, attempts=4)  # expired 39 days ago: pruned
        delivery("msg_old_pending", "pending", created=OLD, attempts=3)  # pending: never pruned
        delivery("msg_recent_delivered", "delivered", created=RECENT, attempts=1, delivered_at=RECENT)
        delivery("msg_recent_expired", "expired", created=CUTOFF - timedelta(hours=1), attempts=2)
        # ^ created before the cutoff but expired after it: it finished after the cutoff, so it stays
    return Seeded(  # unchanged polls leave compact marks (a ring prune leaves alone), not attempt rows
        old_attempts=2 + 5 + 1,
        recent_attempts=1,
        old_deliveries=6,
        old_delivery_attempts=5 * 2 + 4,
        kept_deliveries={"msg_old_pending", "msg_recent_delivered", "msg_recent_expired"},
    )


def delivery_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.scalars(select(WebhookDelivery.id)))


def test_prune_deletes_old_attempts_in_batches_and_keeps_the_history(engine: Engine) -> None:
    seeded = seed(engine)
    before = history(engine)
    assert count(engine, Snapshot) == 2 and count(engine, FindingRecord) >= 2
    assert count(engine, PollAttempt) == seeded.old_attempts + seeded.recent_attempts
    assert count(engine, DeliveryAttempt) == seeded.old_delivery_attempts + 3 + 1 + 2

    steps: list[tuple[str, int, int]] = []
    totals = prune_poll_attempts(
        engine, older_than=CUTOFF, batch_size=4, progress=lambda *step: steps.append(step)
    )

    assert totals == {
        "poll_attempts": seeded.old_attempts,
        "webhook_deliveries": seeded.old_deliveries,
        "delivery_attempts": seeded.old_delivery_attempts,
    }
    attempt_steps = [step for step in steps if step[0] == "poll_attempts"]
    assert [batch for _, batch, _ in attempt_steps] == [4, 4], "8 old attempts in batches of 4"
    assert [so_far for _, _, so_far in attempt_steps] == [4, 8]
    delivery_steps = [step for step in steps if step[0] == "webhook_deliveries"]
    assert [batch for _, batch, _ in delivery_steps] == [4, 2]
    assert sum(batch for table, batch, _ in steps if table == "delivery_attempts") == 14

    assert count(engine, PollAttempt) == seeded.recent_attempts
    with engine.connect() as connection:
        starts = list(connection.scalars(select(PollAttempt.started_at)))
        oks = sorted(connection.scalars(select(PollAttempt.ok)))
    assert all(start >= CUTOFF for start in starts)
    assert oks == [False], "the recent failure is kept"
    assert count(engine, PollMark) == 3 + 3 + 3, "the ring of unchanged polls is left alone"
    assert delivery_ids(engine) == seeded.kept_deliveries
    assert count(engine, DeliveryAttempt) == 3 + 1 + 2, "the pending and the recent deliveries' attempts"
    assert history(engine) == before, "snapshots, findings, listings, tools and alerts untouched"

    again = prune_poll_attempts(engine, older_than=CUTOFF, batch_size=4)
    assert again == {"poll_attempts": 0, "webhook_deliveries": 0, "delivery_attempts": 0}


def test_dry_run_counts_and_changes_nothing(engine: Engine) -> None:
    seeded = seed(engine)
    everything = (*KEPT_TABLES, PollAttempt, WebhookDelivery, DeliveryAttempt)
    before = {model.__tablename__: rows(engine, model) for model in everything}
    steps: list[tuple[str, int, int]] = []

    totals = prune_poll_attempts(
        engine, older_than=CUTOFF, batch_size=2, dry_run=True, progress=lambda *step: steps.append(step)
    )

    assert totals == {
        "poll_attempts": seeded.old_attempts,
        "webhook_deliveries": seeded.old_deliveries,
        "delivery_attempts": seeded.old_delivery_attempts,
    }
    assert steps == []
    assert {model.__tablename__: rows(engine, model) for model in everything} == before


def test_pending_deliveries_are_never_pruned(engine: Engine) -> None:
    seed(engine)
    with engine.connect() as connection:
        pending_attempts = connection.scalar(
            select(func.count()).where(DeliveryAttempt.delivery_id == "msg_old_pending")
        )
    assert pending_attempts == 3

    prune_poll_attempts(engine, older_than=NOW + timedelta(days=365), batch_size=1000)

    assert delivery_ids(engine) == {"msg_old_pending"}, "every finished delivery goes, the pending one stays"
    assert count(engine, DeliveryAttempt) == 3
    assert count(engine, PollAttempt) == 0
    assert count(engine, Snapshot) == 2


def test_each_batch_commits_on_its_own(engine: Engine) -> None:
    seeded = seed(engine)

    class Interrupted(Exception):
        pass

    def stop_after_two(table: str, batch: int, so_far: int) -> None:
        if so_far >= 6:
            raise Interrupted

    with pytest.raises(Interrupted):
        prune_poll_attempts(engine, older_than=CUTOFF, batch_size=3, progress=stop_after_two)
    assert count(engine, PollAttempt) == seeded.old_attempts + seeded.recent_attempts - 6, (
        "the two committed batches stay deleted"
    )
    prune_poll_attempts(engine, older_than=CUTOFF, batch_size=3)
    assert count(engine, PollAttempt) == seeded.recent_attempts


def test_bad_arguments_are_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        prune_poll_attempts(engine, older_than=CUTOFF, batch_size=0)
    with pytest.raises(ValueError, match="aware"):
        prune_poll_attempts(engine, older_than=CUTOFF.replace(tzinfo=None))


def write_config(tmp_path: Path, database_url: str) -> Path:
    config = tmp_path / "monitor.toml"
    config.write_text(f"[monitor]\ndatabase_url = {database_url!r}\n", encoding="utf-8")
    return config


def test_prune_command(database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine = make_engine(database_url)
    try:
        migrate(engine)
        seeded = seed(engine)
        before = history(engine)
        config = str(write_config(tmp_path, database_url))

        assert main(["prune", "--config", config, "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("dry run: pruning ")
        assert (
            f"would delete {seeded.old_attempts} poll attempts, 6 webhook deliveries, 14 delivery attempts"
            in out
        )
        assert "nothing was changed" in out
        assert count(engine, PollAttempt) == seeded.old_attempts + seeded.recent_attempts

        assert main(["prune", "--config", config, "--older-than", "30d", "--batch-size", "5"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "in batches of 5" in lines[0]
        assert "poll_attempts: deleted 5 (5 so far)" in lines
        assert "poll_attempts: deleted 3 (8 so far)" in lines
        assert lines[-1] == (
            f"deleted {seeded.old_attempts} poll attempts, 6 webhook deliveries, 14 delivery attempts; "
            "snapshots, findings, listings and alerts are kept"
        )
        assert count(engine, PollAttempt) == seeded.recent_attempts
        assert history(engine) == before
    finally:
        engine.dispose()


def test_prune_command_refuses_an_unmigrated_database_and_bad_options(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(tmp_path, database_url))
    assert main(["prune", "--config", config]) == 2
    assert "run `drift-monitor migrate`" in capsys.readouterr().err
    for option in (["--older-than", "soon"], ["--batch-size", "0"], ["--batch-size", "many"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["prune", "--config", config, *option])
        assert exit_info.value.code == 2
    assert "--batch-size" in capsys.readouterr().err
