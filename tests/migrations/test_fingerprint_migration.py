"""Migration 0012 on a database the previous release filled: every fingerprint becomes v2 (RFC 8785).

The old release fingerprinted with `json.dumps(sort_keys=True)`, so `{"x": 1.0}` and `{"x": 1}`
were two definitions; v2 cannot tell them apart, so they merge, and so do the listings that held
them. The proof that the recomputation is right: after it, polling the same tools again is no
new version, and a host session that held the old fingerprint holds the new one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, MetaData, func, insert, inspect, select
from support import tool
from support.polls import record_poll, stored_tools

from monitor.core.fingerprint import fingerprint, tool_fingerprint
from monitor.store import Store, migrate
from monitor.store.models import HostSession, Listing, Snapshot, ToolDefinition

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def v1_form(tool: dict[str, Any]) -> str:
    """The first release's canonical tool form."""
    return json.dumps(tool, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def v1_listing(tools: list[dict[str, Any]]) -> str:
    body = "[" + ",".join(v1_form(t) for t in sorted(tools, key=lambda t: t["name"])) + "]"
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def v1_tool(tool: dict[str, Any]) -> str:
    return hashlib.sha256(v1_form(tool).encode("utf-8", "surrogatepass")).hexdigest()


SEARCH = tool("search", description="Search.")
SCALE_FLOAT = tool("scale", input_schema={"type": "object", "maximum": 1.0, "big": 1e16})
SCALE_INT = tool("scale", input_schema={"type": "object", "maximum": 1, "big": 10**16})
ECHO = tool("écho", description="Échos ☃", input_schema=None, read_only=True)
V1 = [SEARCH, SCALE_FLOAT]
V2 = [SEARCH, SCALE_INT]  # the same listing to JCS, a different one to the first release
V3 = [SEARCH, SCALE_INT, ECHO]


def fill_as_the_previous_release(engine: Engine) -> None:
    """Migrate to 0003 and write what the first release's poll transaction wrote for three versions."""
    migrate(engine, "0003")
    meta = MetaData()
    meta.reflect(engine)
    t = meta.tables
    with engine.begin() as db:
        server_id = db.execute(
            insert(t["servers"])
            .values(
                name="calc",
                transport="http",
                url="https://calc.example/mcp",
                origin="api",
                created_at=T0,
                consecutive_failures=0,
                era="handshake",
            )
            .returning(t["servers"].c.id)
        ).scalar_one()
        tool_ids: dict[str, int] = {}
        for version, tools in enumerate((V1, V2, V3), start=1):
            at = T0 + timedelta(hours=version)
            listing_id = db.execute(
                insert(t["listings"])
                .values(fingerprint=v1_listing(tools), tool_count=len(tools), created_at=at)
                .returning(t["listings"].c.id)
            ).scalar_one()
            for position, tool in enumerate(tools):
                fp = v1_tool(tool)
                if fp not in tool_ids:
                    tool_ids[fp] = db.execute(
                        insert(t["tool_definitions"])
                        .values(fingerprint=fp, name=tool["name"], definition=tool)
                        .returning(t["tool_definitions"].c.id)
                    ).scalar_one()
                db.execute(
                    insert(t["listing_tools"]).values(
                        listing_id=listing_id, tool_id=tool_ids[fp], position=position, meta=None
                    )
                )
            db.execute(
                insert(t["snapshots"]).values(
                    server_id=server_id,
                    version=version,
                    listing_id=listing_id,
                    first_seen=at,
                    last_seen=at,
                    poll_count=1,
                    protocol_version="2025-11-25",
                )
            )
        db.execute(
            insert(t["host_sessions"]).values(
                server_id=server_id,
                session_id="s-1",
                client="gateway/1",
                connected_at=T0,
                last_heartbeat_at=T0,
                fingerprint=v1_listing(V1),
                fingerprint_since=T0,
            )
        )


def test_upgrade_recomputes_every_fingerprint_from_the_stored_json(fresh_engine: Engine) -> None:
    fill_as_the_previous_release(fresh_engine)
    assert v1_listing(V1) != v1_listing(V2) and fingerprint(V1) == fingerprint(V2)
    migrate(fresh_engine)
    store = Store(fresh_engine)
    with store.sessions() as session:
        definitions = dict(
            session.execute(select(ToolDefinition.fingerprint, ToolDefinition.definition)).all()
        )
        assert set(definitions) == {tool_fingerprint(t) for t in V3}, "scale 1.0 and scale 1 merged"
        assert all(tool_fingerprint(d) == fp for fp, d in definitions.items())
        listing_fps = set(session.scalars(select(Listing.fingerprint)))
        assert listing_fps == {fingerprint(V1), fingerprint(V3)}
        versions = dict(
            session.execute(
                select(Snapshot.version, Listing.fingerprint).join(Listing, Snapshot.listing_id == Listing.id)
            ).all()
        )
        assert versions == {1: fingerprint(V1), 2: fingerprint(V2), 3: fingerprint(V3)}, "history kept"
        held = session.scalar(select(HostSession.fingerprint))
        assert held == fingerprint(V1)
        orphans = session.scalar(select(func.count()).select_from(ToolDefinition))
        assert orphans == 3
    # A poll after the upgrade that sees the same tools is the same version, not a new one.
    (server_id,) = {store.server_id("calc")}
    assert server_id is not None
    outcome = record_poll(store, server_id, V3, T0 + timedelta(days=1))
    assert outcome.version == 3 and not outcome.new_version and outcome.findings == []
    listing = stored_tools(store, "calc", T0 + timedelta(days=2))
    assert fingerprint(listing) == fingerprint(V3)


def test_upgrade_of_an_empty_database_of_the_previous_release(fresh_engine: Engine) -> None:
    migrate(fresh_engine, "0003")
    migrate(fresh_engine)  # 0012 and whatever follows it
    assert "client_views" in inspect(fresh_engine).get_table_names()
