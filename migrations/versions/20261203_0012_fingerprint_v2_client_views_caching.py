"""fingerprint v2 (RFC 8785), client views, 2026-07-28 caching hints

Recomputes every stored tool and listing fingerprint from the stored JSON with fingerprint v2
(RFC 8785). Definitions that v1 told apart but JCS does not (`1.0` and `1`) merge into one, and
so do listings; snapshots and host sessions follow the listing they pointed at, approvals the
definition they approved. A definition that
is not I-JSON (a lone surrogate SQLite kept) cannot have a v2 fingerprint and keeps its v1 one,
and so does every listing holding it.

Adds: per-server client profiles and the views they see (`client_views`), `ttlMs`/`cacheScope`
per poll and per server, whether the watch session's listen acknowledgement honoured
`toolsListChanged`, the re-fetches of a listing whose pages straddled a change,
and the client capabilities a host session declared.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from monitor.core.fingerprint import NotIJSONError, canonical_tool, utf16_order

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")
JSONValue = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BATCH = 500


def upgrade() -> None:
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("client", JSONValue, nullable=True))
        batch_op.add_column(sa.Column("ttl_ms", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("cache_scope", sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column("tools_list_changed_honored", sa.Boolean(), nullable=True))
    with op.batch_alter_table("poll_attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ttl_ms", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("cache_scope", sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column("refetches", sa.Integer(), nullable=True))
    with op.batch_alter_table("host_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("client_capabilities", JSONValue, nullable=True))
    op.create_table(
        "client_views",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("profile", sa.String(length=200), nullable=False),
        sa.Column("client", JSONValue, nullable=False),
        sa.Column("listing_id", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("poll_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["server_id"],
            ["servers.id"],
            name=op.f("fk_client_views_server_id_servers"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["listing_id"], ["listings.id"], name=op.f("fk_client_views_listing_id_listings")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_client_views")),
    )
    with op.batch_alter_table("client_views", schema=None) as batch_op:
        batch_op.create_index(
            "ix_client_views_server_id_profile_first_seen",
            ["server_id", "profile", "first_seen"],
            unique=False,
        )
        batch_op.create_index("ix_client_views_listing_id", ["listing_id"], unique=False)
    recompute_fingerprints(op.get_bind())


def downgrade() -> None:
    """The new columns and table go; fingerprints stay v2 (v1 cannot be restored faithfully)."""
    with op.batch_alter_table("client_views", schema=None) as batch_op:
        batch_op.drop_index("ix_client_views_listing_id")
        batch_op.drop_index("ix_client_views_server_id_profile_first_seen")
    op.drop_table("client_views")
    with op.batch_alter_table("host_sessions", schema=None) as batch_op:
        batch_op.drop_column("client_capabilities")
    with op.batch_alter_table("poll_attempts", schema=None) as batch_op:
        batch_op.drop_column("refetches")
        batch_op.drop_column("cache_scope")
        batch_op.drop_column("ttl_ms")
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.drop_column("tools_list_changed_honored")
        batch_op.drop_column("cache_scope")
        batch_op.drop_column("ttl_ms")
        batch_op.drop_column("client")


# --- the data: every fingerprint recomputed from the stored JSON -----------------------------------

meta = sa.MetaData()
tool_definitions = sa.Table(
    "tool_definitions",
    meta,
    sa.Column("id", sa.Integer),
    sa.Column("fingerprint", sa.String(64)),
    sa.Column("name", sa.Text),
    sa.Column("definition", JSONValue),
)
listings = sa.Table("listings", meta, sa.Column("id", sa.Integer), sa.Column("fingerprint", sa.String(64)))
listing_tools = sa.Table(
    "listing_tools", meta, sa.Column("listing_id", sa.Integer), sa.Column("tool_id", sa.Integer)
)
snapshots = sa.Table("snapshots", meta, sa.Column("id", sa.Integer), sa.Column("listing_id", sa.Integer))
host_sessions = sa.Table(
    "host_sessions", meta, sa.Column("id", sa.Integer), sa.Column("fingerprint", sa.String(64))
)
approvals = sa.Table(
    "approvals", meta, sa.Column("id", sa.Integer), sa.Column("definition_fingerprint", sa.String(64))
)


def recompute_fingerprints(connection: sa.Connection) -> None:
    forms, tool_fps = _tool_forms(connection)
    old_tool_fps = dict(
        connection.execute(sa.select(tool_definitions.c.id, tool_definitions.c.fingerprint)).all()
    )
    tool_survivor = _merge(connection, tool_fps, "tool definitions", _merge_tools)
    _refingerprint(connection, tool_definitions, tool_fps, tool_survivor)

    members: dict[int, list[int]] = defaultdict(list)
    for listing_id, tool_id in connection.execute(
        sa.select(listing_tools.c.listing_id, listing_tools.c.tool_id)
    ):
        members[listing_id].append(tool_id)
    old_listing_fps = dict(connection.execute(sa.select(listings.c.id, listings.c.fingerprint)).all())
    listing_fps: dict[int, str] = {}
    for listing_id, old in old_listing_fps.items():
        tool_forms = [forms.get(tool_survivor.get(t, t)) for t in members.get(listing_id, [])]
        if any(form is None for form in tool_forms):
            listing_fps[listing_id] = old  # holds a definition that is not I-JSON: stays v1
            continue
        ordered = sorted((f for f in tool_forms if f is not None), key=lambda f: utf16_order(f[0]))
        body = "[" + ",".join(form for _, form in ordered) + "]"
        listing_fps[listing_id] = hashlib.sha256(body.encode("utf-8")).hexdigest()
    listing_survivor = _merge(connection, listing_fps, "listings", _merge_listings)
    _refingerprint(connection, listings, listing_fps, listing_survivor)

    for old, new in {old_tool_fps[i]: tool_fps[i] for i in tool_fps}.items():
        if old != new:  # an approval names the definition it approved
            connection.execute(
                sa.update(approvals)
                .where(approvals.c.definition_fingerprint == old)
                .values(definition_fingerprint=new)
            )
    for old, new in {old_listing_fps[i]: listing_fps[i] for i in listing_fps}.items():
        if old != new:
            connection.execute(
                sa.update(host_sessions).where(host_sessions.c.fingerprint == old).values(fingerprint=new)
            )
    log.info(
        "fingerprint v2: %d tool definitions (%d merged), %d listings (%d merged)",
        len(tool_fps),
        len(tool_survivor),
        len(listing_fps),
        len(listing_survivor),
    )


def _tool_forms(connection: sa.Connection) -> tuple[dict[int, tuple[str, str]], dict[int, str]]:
    """Each definition's (name, v2 canonical form) and v2 fingerprint; v1 kept for non-I-JSON ones."""
    forms: dict[int, tuple[str, str]] = {}
    fingerprints: dict[int, str] = {}
    rows = connection.execute(
        sa.select(
            tool_definitions.c.id,
            tool_definitions.c.fingerprint,
            tool_definitions.c.name,
            tool_definitions.c.definition,
        )
    ).all()
    for tool_id, old, name, definition in rows:
        try:
            form = canonical_tool(definition)
        except NotIJSONError as exc:
            log.warning("tool definition %d (%r) keeps its v1 fingerprint: %s", tool_id, name, exc)
            fingerprints[tool_id] = old
            continue
        forms[tool_id] = (name, form)
        fingerprints[tool_id] = hashlib.sha256(form.encode("utf-8")).hexdigest()
    return forms, fingerprints


def _merge(connection: sa.Connection, fingerprints: dict[int, str], what: str, merge: Any) -> dict[int, int]:
    """Rows whose new fingerprints coincide merge into the oldest; returns {merged id: survivor id}."""
    by_fp: dict[str, list[int]] = defaultdict(list)
    for row_id, fp in fingerprints.items():
        by_fp[fp].append(row_id)
    survivor: dict[int, int] = {}
    for ids in by_fp.values():
        keep, *others = sorted(ids)
        survivor.update((other, keep) for other in others)
    if survivor:
        log.info("fingerprint v2: merging %d %s that RFC 8785 cannot tell apart", len(survivor), what)
        merge(connection, survivor)
    return survivor


def _merge_tools(connection: sa.Connection, survivor: dict[int, int]) -> None:
    connection.execute(
        sa.update(listing_tools)
        .where(listing_tools.c.tool_id == sa.bindparam("merged"))
        .values(tool_id=sa.bindparam("keep")),
        [{"merged": merged, "keep": keep} for merged, keep in survivor.items()],
    )
    for chunk in _chunks(list(survivor)):
        connection.execute(sa.delete(tool_definitions).where(tool_definitions.c.id.in_(chunk)))


def _merge_listings(connection: sa.Connection, survivor: dict[int, int]) -> None:
    connection.execute(
        sa.update(snapshots)
        .where(snapshots.c.listing_id == sa.bindparam("merged"))
        .values(listing_id=sa.bindparam("keep")),
        [{"merged": merged, "keep": keep} for merged, keep in survivor.items()],
    )
    for chunk in _chunks(list(survivor)):
        connection.execute(sa.delete(listing_tools).where(listing_tools.c.listing_id.in_(chunk)))
        connection.execute(sa.delete(listings).where(listings.c.id.in_(chunk)))


def _refingerprint(
    connection: sa.Connection, table: sa.Table, fingerprints: dict[int, str], merged: dict[int, int]
) -> None:
    """Set the new fingerprints in two passes (a placeholder first), so the unique index never sees
    a row take a value another row is about to give up."""
    changed = {i: fp for i, fp in fingerprints.items() if i not in merged}
    current = dict(connection.execute(sa.select(table.c.id, table.c.fingerprint)).all())
    changed = {i: fp for i, fp in changed.items() if current.get(i) != fp}
    if not changed:
        return
    statement = (
        sa.update(table).where(table.c.id == sa.bindparam("row_id")).values(fingerprint=sa.bindparam("fp"))
    )
    connection.execute(statement, [{"row_id": i, "fp": f"v1:{i}"} for i in changed])
    connection.execute(statement, [{"row_id": i, "fp": fp} for i, fp in changed.items()])


def _chunks(items: list[int]) -> list[list[int]]:
    return [items[start : start + BATCH] for start in range(0, len(items), BATCH)]
