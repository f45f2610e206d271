"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "listings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("tool_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_listings")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_listings_fingerprint")),
    )
    op.create_table(
        "servers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("transport", sa.String(length=10), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("origin", sa.String(length=10), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_poll_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_success_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("protocol_version", sa.String(length=40), nullable=True),
        sa.Column(
            "server_info",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "capabilities",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("list_changed_advertised", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_servers")),
        sa.UniqueConstraint("name", name=op.f("uq_servers_name")),
    )
    op.create_table(
        "tool_definitions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "definition",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_definitions")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_tool_definitions_fingerprint")),
    )
    op.create_table(
        "listing_tools",
        sa.Column("listing_id", sa.Integer(), nullable=False),
        sa.Column("tool_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column(
            "meta",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.ForeignKeyConstraint(
            ["listing_id"],
            ["listings.id"],
            name=op.f("fk_listing_tools_listing_id_listings"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tool_id"], ["tool_definitions.id"], name=op.f("fk_listing_tools_tool_id_tool_definitions")
        ),
        sa.PrimaryKeyConstraint("listing_id", "tool_id", name=op.f("pk_listing_tools")),
    )
    with op.batch_alter_table("listing_tools", schema=None) as batch_op:
        batch_op.create_index("ix_listing_tools_tool_id", ["tool_id"], unique=False)

    op.create_table(
        "snapshots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("listing_id", sa.Integer(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("poll_count", sa.Integer(), nullable=False),
        sa.Column("protocol_version", sa.String(length=40), nullable=True),
        sa.Column(
            "server_info",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.ForeignKeyConstraint(
            ["listing_id"], ["listings.id"], name=op.f("fk_snapshots_listing_id_listings")
        ),
        sa.ForeignKeyConstraint(
            ["server_id"], ["servers.id"], name=op.f("fk_snapshots_server_id_servers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshots")),
        sa.UniqueConstraint("server_id", "version", name="uq_snapshots_server_id_version"),
    )
    with op.batch_alter_table("snapshots", schema=None) as batch_op:
        batch_op.create_index("ix_snapshots_listing_id", ["listing_id"], unique=False)
        batch_op.create_index("ix_snapshots_server_id_first_seen", ["server_id", "first_seen"], unique=False)

    op.create_table(
        "findings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("from_snapshot_id", sa.Integer(), nullable=True),
        sa.Column("to_snapshot_id", sa.Integer(), nullable=True),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("severity", sa.String(length=10), nullable=False),
        sa.Column("severity_rank", sa.Integer(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("field", sa.Text(), nullable=True),
        sa.Column(
            "old",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "new",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "detail",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.ForeignKeyConstraint(
            ["from_snapshot_id"], ["snapshots.id"], name=op.f("fk_findings_from_snapshot_id_snapshots")
        ),
        sa.ForeignKeyConstraint(
            ["server_id"], ["servers.id"], name=op.f("fk_findings_server_id_servers"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["to_snapshot_id"], ["snapshots.id"], name=op.f("fk_findings_to_snapshot_id_snapshots")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index("ix_findings_detected_at", ["detected_at"], unique=False)
        batch_op.create_index("ix_findings_server_id_detected_at", ["server_id", "detected_at"], unique=False)
        batch_op.create_index("ix_findings_to_snapshot_id", ["to_snapshot_id"], unique=False)

    op.create_table(
        "poll_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error_kind", sa.String(length=20), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("snapshot_id", sa.Integer(), nullable=True),
        sa.Column("pages", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["server_id"], ["servers.id"], name=op.f("fk_poll_attempts_server_id_servers"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            ["snapshots.id"],
            name=op.f("fk_poll_attempts_snapshot_id_snapshots"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_poll_attempts")),
    )
    with op.batch_alter_table("poll_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_poll_attempts_server_id_ok_id", ["server_id", "ok", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("poll_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_poll_attempts_server_id_ok_id")

    op.drop_table("poll_attempts")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index("ix_findings_to_snapshot_id")
        batch_op.drop_index("ix_findings_server_id_detected_at")
        batch_op.drop_index("ix_findings_detected_at")

    op.drop_table("findings")
    with op.batch_alter_table("snapshots", schema=None) as batch_op:
        batch_op.drop_index("ix_snapshots_server_id_first_seen")
        batch_op.drop_index("ix_snapshots_listing_id")

    op.drop_table("snapshots")
    with op.batch_alter_table("listing_tools", schema=None) as batch_op:
        batch_op.drop_index("ix_listing_tools_tool_id")

    op.drop_table("listing_tools")
    op.drop_table("tool_definitions")
    op.drop_table("servers")
    op.drop_table("listings")
