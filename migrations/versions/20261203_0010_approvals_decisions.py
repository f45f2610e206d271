"""approvals and decisions

Revision ID: 0010
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("approval", sa.String(length=10), server_default="tofu", nullable=False)
        )
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=10), nullable=False),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("definition_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("mode", sa.String(length=10), nullable=True),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["server_id"], ["servers.id"], name=op.f("fk_approvals_server_id_servers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
    )
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.create_index("ix_approvals_server_id_tool_id", ["server_id", "tool", "id"], unique=False)
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decision", sa.String(length=5), nullable=False),
        sa.Column("reason_code", sa.String(length=40), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=True),
        sa.Column("severity", sa.String(length=10), nullable=True),
        sa.Column("approved_version", sa.Integer(), nullable=True),
        sa.Column("current_version", sa.Integer(), nullable=True),
        sa.Column("stale_listing", sa.Boolean(), nullable=False),
        sa.Column("session_id", sa.String(length=200), nullable=True),
        sa.Column("client", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["server_id"], ["servers.id"], name=op.f("fk_decisions_server_id_servers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.create_index("ix_decisions_server_id_id", ["server_id", "id"], unique=False)
        batch_op.create_index("ix_decisions_decided_at", ["decided_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.drop_index("ix_decisions_decided_at")
        batch_op.drop_index("ix_decisions_server_id_id")
    op.drop_table("decisions")
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_index("ix_approvals_server_id_tool_id")
    op.drop_table("approvals")
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.drop_column("approval")
