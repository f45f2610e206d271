"""Rows as an older release wrote them, for migration tests: written through the tables as the database
has them at that revision (reflected), never through today's models, which describe the newest schema."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, MetaData, Table

from monitor.core.fingerprint import CanonicalListing


class OlderRows:
    """Inserts into the named tables of `connection`'s database as it is now."""

    def __init__(self, connection: Connection, *names: str) -> None:
        self.connection = connection
        self.table = {name: Table(name, MetaData(), autoload_with=connection) for name in names}

    def insert(self, name: str, /, **values: Any) -> int:
        """One row; its id."""
        statement = self.table[name].insert().values(**values).returning(self.table[name].c.id)
        return int(self.connection.execute(statement).scalar_one())

    def server(self, name: str, at: datetime) -> int:
        return self.insert(
            "servers", name=name, transport="http", origin="config", created_at=at, consecutive_failures=0
        )

    def polled_server(self, name: str, listing: CanonicalListing, at: datetime) -> int:
        """A server polled once, successfully, at `at` with its first version of `listing`, on an
        hour's interval; its id."""
        server_id = self.server(name, at)
        self.version(server_id, listing, at)
        servers = self.table["servers"]
        self.connection.execute(
            servers.update()
            .where(servers.c.id == server_id)
            .values(last_success_at=at, last_poll_at=at, interval_seconds=3600)
        )
        return server_id

    def alert(self, server_id: int, tool: str, at: datetime, **columns: Any) -> int:
        """An open critical `read-only-revoked` alert about `tool`, opened at `at`; `columns` (a
        resolved state, who resolved it and why) replace what they name. Its id."""
        opened = {
            "server_id": server_id,
            "rule": "read-only-revoked",
            "severity": "critical",
            "severity_rank": 4,
            "tool": tool,
            "state": "open",
            "open_key": f"{server_id}/read-only-revoked/{tool}",
            "message": f"{tool} is no longer read-only",
            "opened_at": at,
            "last_seen_at": at,
        }
        return self.insert("alerts", **{**opened, **columns})

    def version(self, server_id: int, listing: CanonicalListing, at: datetime) -> int:
        """The server's first version of `listing`, seen once at `at`, with the listing and its tools
        (what a later migration re-fingerprints from); the version's id."""
        listing_id = self.insert(
            "listings", fingerprint=listing.fingerprint, tool_count=len(listing.tools), created_at=at
        )
        for position, name in enumerate(listing.forms):
            tool_id = self.insert(
                "tool_definitions",
                fingerprint=listing.tool_fingerprint(name),
                name=name,
                definition=listing.tools[name],
            )
            self.connection.execute(
                self.table["listing_tools"]
                .insert()
                .values(listing_id=listing_id, tool_id=tool_id, position=position)
            )
        return self.insert(
            "snapshots",
            server_id=server_id,
            version=1,
            listing_id=listing_id,
            first_seen=at,
            last_seen=at,
            poll_count=1,
        )
