"""Migration 0011 on a database the previous release (schema 0003) filled: nothing lost, new columns
empty, and the new read side (alert pages, silences) works on the old rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, MetaData, insert, select

from monitor.core.states import AlertState
from monitor.notify import silences
from monitor.store import current_revision, migrate, queries
from monitor.store.models import Alert, FindingRecord, PollAttempt, Snapshot
from monitor.store.polls import Store

T0 = datetime(2026, 10, 1, 12, 0, tzinfo=UTC)


def upgrade_to(engine: Engine, revision: str) -> None:
    migrate(engine, revision)


def fill_as_release_0003(engine: Engine) -> None:
    """Rows as the previous release wrote them, through the tables as they were (reflected)."""
    tables = MetaData()
    tables.reflect(engine)
    t = tables.tables
    with engine.begin() as connection:
        connection.execute(
            insert(t["servers"]).values(
                id=1,
                name="tenants",
                transport="http",
                url="http://127.0.0.1:9/mcp",
                origin="config",
                created_at=T0,
                consecutive_failures=0,
                era="handshake",
            )
        )
        connection.execute(
            insert(t["listings"]).values(id=1, fingerprint="a" * 64, tool_count=0, created_at=T0)
        )
        connection.execute(
            insert(t["listings"]).values(id=2, fingerprint="b" * 64, tool_count=0, created_at=T0)
        )
        for version, listing in ((1, 1), (2, 2)):
            at = T0 + timedelta(minutes=version)
            connection.execute(
                insert(t["snapshots"]).values(
                    id=version,
                    server_id=1,
                    version=version,
                    listing_id=listing,
                    first_seen=at,
                    last_seen=at,
                    poll_count=1,
                )
            )
        connection.execute(
            insert(t["findings"]).values(
                id=1,
                server_id=1,
                from_snapshot_id=1,
                to_snapshot_id=2,
                detected_at=T0 + timedelta(minutes=2),
                rule="read-only-revoked",
                severity="critical",
                severity_rank=4,
                tool="purge",
                field="annotations.readOnlyHint",
                old=True,
                new=False,
                message="purge may now write.",
            )
        )
        connection.execute(
            insert(t["alerts"]).values(
                id=1,
                server_id=1,
                rule="read-only-revoked",
                severity="critical",
                severity_rank=4,
                tool="purge",
                state="acknowledged",
                open_key="1/read-only-revoked/x",
                message="purge may now write.",
                opened_at=T0 + timedelta(minutes=2),
                last_seen_at=T0 + timedelta(minutes=2),
                acknowledged_at=T0 + timedelta(minutes=3),
            )
        )
        connection.execute(insert(t["alert_findings"]).values(alert_id=1, finding_id=1))
        connection.execute(
            insert(t["poll_attempts"]).values(
                server_id=1,
                started_at=T0,
                duration_ms=5.0,
                ok=False,
                error_kind="malformed",
                error="bad",
            )
        )


def test_upgrade_from_a_database_the_previous_release_filled(fresh_engine: Engine) -> None:
    upgrade_to(fresh_engine, "0003")
    fill_as_release_0003(fresh_engine)
    assert migrate(fresh_engine) == current_revision(fresh_engine)
    store = Store(fresh_engine)
    with store.sessions() as session:
        alert = session.get_one(Alert, 1)
        assert (alert.state, alert.clear_since, alert.acknowledged_by, alert.resolved_by) == (
            AlertState.ACKNOWLEDGED,
            None,
            None,
            None,
        )
        assert session.get_one(FindingRecord, 1).silence_id is None
        assert [s.validation_errors for s in session.scalars(select(Snapshot))] == [None, None]
        assert session.scalars(select(PollAttempt.raw_payload)).all() == [None]
        detail = queries.alert_detail(session, 1)
        assert detail is not None and [f.rule for f in detail.findings] == ["read-only-revoked"]
        (server,) = queries.list_servers(session)
        assert server.acknowledged_alerts["critical"] == 1 and server.worst_unresolved_rank == 4
    with store.sessions.begin() as session:
        created = silences.create_silence(
            session,
            server="tenants",
            tool=None,
            rule=None,
            ends_at=T0 + timedelta(days=1),
            created_by="dana",
            reason="upgrade window",
            now=T0,
        )
        assert created.active
