"""compact attempt rows: a ring of small rows per server for unchanged polls

Revision ID: 0015
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "poll_marks",
        sa.Column("server_id", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["server_id"], ["servers.id"], name=op.f("fk_poll_marks_server_id_servers"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("server_id", "slot", name=op.f("pk_poll_marks")),
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("polls_marked", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("servers", schema=None) as batch_op:
        batch_op.drop_column("polls_marked")
    op.drop_table("poll_marks")
