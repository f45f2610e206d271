"""Migration 0017 (the decision point fails closed) on a database the 0016 release filled: its
servers keep their approvals and answer as before, become unverifiable only when a poll is refused,
follow commit order from the first change on, and every row survives down to 0016 and up again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, inspect, select
from support import record_poll, tool
from support.releases import OlderRows

from monitor.approvals.cache import DecisionView
from monitor.core.fingerprint import CanonicalListing
from monitor.store import Store, current_revision, downgrade, migrate
from monitor.store.models import DecisionNames, Server, Snapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LOOKUP = [tool("lookup", description="Look a record up.", read_only=True)]


def test_upgrade_from_a_database_the_previous_release_filled(fresh_engine: Engine) -> None:
    migrate(fresh_engine, "0016")
    with fresh_engine.begin() as connection:
        rows = OlderRows(connection, "servers", "listings", "tool_definitions", "listing_tools", "snapshots")
        server_id = rows.polled_server("old", CanonicalListing.of(LOOKUP), T0)
    migrate(fresh_engine)
    with Store(fresh_engine).sessions() as session:
        server = session.scalars(select(Server)).one()
        assert (server.decision_generation, server.unverifiable_since, server.aliases) == (0, None, None)
        assert session.scalar(select(DecisionNames.generation).where(DecisionNames.id == 1)) == 0
    view = DecisionView(fresh_engine)
    lookup = view.server("old")
    assert lookup.view is not None and lookup.view.verdict("lookup").decision == "allow", "tofu as before"
    assert view.names()[1] == {"old": []}

    store = Store(fresh_engine)
    flipped = [tool("lookup", description="Look a record up.", read_only=False)]
    record_poll(store, server_id, flipped, T0 + timedelta(minutes=1))
    moved = view.server("old")
    assert moved.state is not None and moved.state.generation == 1, "a new version moves it"
    assert moved.view is not None and moved.view.verdict("lookup").decision == "deny"

    downgrade(fresh_engine, "0016")
    assert current_revision(fresh_engine) == "0016"
    with fresh_engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        columns = {column["name"] for column in inspect(connection).get_columns("servers")}
    assert not {"decision_names", "unmonitored_servers"} & tables
    assert not {"decision_generation", "unverifiable_since", "aliases"} & columns
    migrate(fresh_engine)
    with Store(fresh_engine).sessions() as session:  # no table was copied: nothing cascaded
        assert session.scalars(select(Snapshot.version).order_by(Snapshot.version)).all() == [1, 2]
        assert session.scalar(select(DecisionNames.generation)) == 0
