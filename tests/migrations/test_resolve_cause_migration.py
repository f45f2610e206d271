"""Migration 0021 (why each alert ended) on a database the 0020 release filled: alerts resolved before
it take the cause their other columns record (nobody named: cleared; an approval's note: approved;
else by hand), unresolved ones none, and going down to 0020 and up again keeps every alert."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from support.releases import OlderRows

from monitor.core.states import ResolveCause
from monitor.store import current_revision, downgrade, migrate
from monitor.store.models import Alert

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_alerts_resolved_before_keep_the_cause_their_columns_record(fresh_engine: Engine) -> None:
    migrate(fresh_engine, "0020")
    with fresh_engine.begin() as connection:
        rows = OlderRows(connection, "servers", "alerts")
        server_id = rows.server("old", T0)
        ended = {"state": "resolved", "open_key": None, "resolved_at": T0}
        ids = {
            "cleared": rows.alert(server_id, "a", T0, **ended),
            "approved": rows.alert(
                server_id, "b", T0, **ended, resolved_by="ann", resolve_note="approved as in v2: ok"
            ),
            "by-hand": rows.alert(server_id, "c", T0, **ended, resolved_by="sam", resolve_note="false alarm"),
            "open": rows.alert(server_id, "d", T0),
        }
    migrate(fresh_engine)

    def causes() -> dict[str, ResolveCause | None]:
        with Session(fresh_engine) as session:
            found = {row.id: row.resolve_cause for row in session.scalars(select(Alert))}
        return {name: found[alert_id] for name, alert_id in ids.items()}

    assert causes() == {
        "cleared": ResolveCause.CLEARED,
        "approved": ResolveCause.APPROVED,
        "by-hand": ResolveCause.BY_HAND,
        "open": None,
    }
    downgrade(fresh_engine, "0020")
    assert current_revision(fresh_engine) == "0020"
    migrate(fresh_engine)
    assert len(causes()) == 4, "every alert kept down and up again"
