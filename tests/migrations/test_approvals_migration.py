"""Migration 0010 (approvals and decisions) on a database the previous release (schema 0003) filled:
its servers become tofu servers whose first version is trusted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Boolean, Engine, Integer, String, column, insert, table
from support import tool

from monitor.approvals.cache import DecisionView
from monitor.core.fingerprint import fingerprint, tool_fingerprint
from monitor.store import migrate
from monitor.store.columns import JSONValue, UTCDateTime

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def test_upgrade_from_a_database_the_previous_release_filled(fresh_engine: Engine) -> None:
    """0003 with a polled server (two versions, one tool flipped): after the upgrade it is a tofu
    server whose first version is trusted, so the flipped tool is denied and the other allowed."""
    migrate(fresh_engine, "0003")
    servers = table(
        "servers",
        column("id", Integer),
        column("name", String),
        column("transport", String),
        column("url", String),
        column("origin", String),
        column("created_at", UTCDateTime()),
        column("consecutive_failures", Integer),
    )
    definitions = table(
        "tool_definitions",
        column("id", Integer),
        column("fingerprint", String),
        column("name", String),
        column("definition", JSONValue),
    )
    listings = table(
        "listings",
        column("id", Integer),
        column("fingerprint", String),
        column("tool_count", Integer),
        column("created_at", UTCDateTime()),
    )
    members = table(
        "listing_tools",
        column("listing_id", Integer),
        column("tool_id", Integer),
        column("position", Integer),
    )
    snapshots = table(
        "snapshots",
        column("id", Integer),
        column("server_id", Integer),
        column("version", Integer),
        column("listing_id", Integer),
        column("first_seen", UTCDateTime()),
        column("last_seen", UTCDateTime()),
        column("poll_count", Integer),
    )
    attempts = table(
        "poll_attempts",
        column("server_id", Integer),
        column("started_at", UTCDateTime()),
        column("duration_ms", Integer),
        column("ok", Boolean),
    )
    lookup_v1, lookup_v2, search = (
        tool("lookup", read_only=True),
        tool("lookup", read_only=False),
        tool("search", read_only=True),
    )
    with fresh_engine.begin() as connection:
        connection.execute(
            insert(servers).values(
                id=1,
                name="old",
                transport="http",
                url="http://127.0.0.1:9/",
                origin="config",
                created_at=T0,
                consecutive_failures=0,
            )
        )
        for tool_id, definition in enumerate((lookup_v1, lookup_v2, search), start=1):
            connection.execute(
                insert(definitions).values(
                    id=tool_id,
                    fingerprint=tool_fingerprint(definition),
                    name=definition["name"],
                    definition=definition,
                )
            )
        for version, tool_ids in ((1, (1, 3)), (2, (2, 3))):
            listed = [(lookup_v1 if i == 1 else lookup_v2 if i == 2 else search) for i in tool_ids]
            connection.execute(
                insert(listings).values(
                    id=version, fingerprint=fingerprint(listed), tool_count=2, created_at=T0
                )
            )
            for position, tool_id in enumerate(tool_ids):
                connection.execute(
                    insert(members).values(listing_id=version, tool_id=tool_id, position=position)
                )
            at = T0 + timedelta(hours=version)
            connection.execute(
                insert(snapshots).values(
                    id=version,
                    server_id=1,
                    version=version,
                    listing_id=version,
                    first_seen=at,
                    last_seen=at,
                    poll_count=1,
                )
            )
            connection.execute(insert(attempts).values(server_id=1, started_at=at, duration_ms=5, ok=True))
    migrate(fresh_engine)
    view = DecisionView(fresh_engine).server("old").view
    assert view is not None and view.mode == "tofu" and view.current_version == 2
    assert view.verdict("lookup").decision == "deny" and view.verdict("lookup").rule == "read-only-revoked"
    assert view.verdict("search").decision == "allow" and view.verdict("search").approved_version == 1
