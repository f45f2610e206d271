"""alerts people can trust: hysteresis, acknowledgement notes, silences, kept invalid listings

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("server", sa.String(length=200), nullable=True),
        sa.Column("tool", sa.Text(), nullable=True),
        sa.Column("rule", sa.String(length=64), nullable=True),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_silences")),
    )
    with op.batch_alter_table("silences", schema=None) as batch_op:
        batch_op.create_index("ix_silences_ends_at", ["ends_at"], unique=False)
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("clear_since", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("acknowledged_by", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("ack_note", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("resolved_by", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("resolve_note", sa.Text(), nullable=True))
    # A plain column, no foreign key: adding one makes SQLite rebuild the findings table, and dropping
    # the old table would cascade to alert_findings. Silences are never deleted (they end), so it holds.
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("silence_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("snapshots", schema=None) as batch_op:
        batch_op.add_column(sa.Column("validation_errors", _JSON, nullable=True))
    with op.batch_alter_table("poll_attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("raw_payload", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("poll_attempts", schema=None) as batch_op:
        batch_op.drop_column("raw_payload")
    with op.batch_alter_table("snapshots", schema=None) as batch_op:
        batch_op.drop_column("validation_errors")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_column("silence_id")
    with op.batch_alter_table("alerts", schema=None) as batch_op:
        batch_op.drop_column("resolve_note")
        batch_op.drop_column("resolved_by")
        batch_op.drop_column("ack_note")
        batch_op.drop_column("acknowledged_by")
        batch_op.drop_column("clear_since")
    with op.batch_alter_table("silences", schema=None) as batch_op:
        batch_op.drop_index("ix_silences_ends_at")
    op.drop_table("silences")
