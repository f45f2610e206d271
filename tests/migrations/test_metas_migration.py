"""Migration 0020 (`_meta` per version) on a database the 0019 release filled: the shared
`listing_tools.meta` goes, versions keep no `_meta` until a poll gives them theirs (no finding then),
and a later change is `meta-changed`; every row kept down to 0019 and up again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, inspect, select, update
from support import tool
from support.polls import fetched_poll
from support.releases import OlderRows

from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules.metas import metas_digest
from monitor.store import Store, current_revision, downgrade, migrate
from monitor.store.models import Snapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_upgrade_from_a_database_the_previous_release_filled(fresh_engine: Engine) -> None:
    migrate(fresh_engine, "0019")
    listing = CanonicalListing.of([tool("lookup", read_only=True)])
    with fresh_engine.begin() as connection:
        rows = OlderRows(connection, "servers", "listings", "tool_definitions", "listing_tools", "snapshots")
        server_id = rows.server("old", T0)
        rows.version(server_id, listing, T0)
        connection.execute(update(rows.table["listing_tools"]).values(meta={"ui": {"resourceUri": "ui://a"}}))
    migrate(fresh_engine)
    with fresh_engine.connect() as connection:
        columns = {column["name"] for column in inspect(connection).get_columns("listing_tools")}
    assert "meta" not in columns, "the shared _meta went with the shared listing"
    store = Store(fresh_engine)
    with store.sessions() as session:
        assert session.execute(select(Snapshot.metas, Snapshot.metas_digest)).one() == (None, None)
    first = {"lookup": {"ui": {"resourceUri": "ui://b"}}}
    poll = replace(fetched_poll(server_id, listing, T0), metas=first, metas_digest=metas_digest(first))
    assert store.record(poll).findings == [], "a version kept no _meta before: nothing to compare"
    later = {"lookup": {"ui": {"resourceUri": "ui://c"}}}
    at = T0 + timedelta(minutes=1)
    changed = store.record(
        replace(fetched_poll(server_id, listing, at), metas=later, metas_digest=metas_digest(later))
    )
    assert [(f.rule, f.severity.value) for f in changed.findings] == [("meta-changed", "high")]
    downgrade(fresh_engine, "0019")
    assert current_revision(fresh_engine) == "0019"
    migrate(fresh_engine)
    with store.sessions() as session:
        assert (
            session.scalar(select(Snapshot.poll_count)) == 3
            and session.scalar(select(Snapshot.metas)) is None
        )
