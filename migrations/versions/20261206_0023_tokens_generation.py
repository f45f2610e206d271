"""tokens generation: a counter every process's cache of named tokens follows

- `decision_names.tokens_generation`: moved by the transaction that creates or revokes a named token,
  so each process answers decisions from the tokens it keeps in memory and reads them again, in
  commit order, only when one changed (`monitor.store.generations`). Starts at 0.

A plain ADD COLUMN with a server default on both databases.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "decision_names", sa.Column("tokens_generation", sa.BigInteger(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    with op.batch_alter_table("decision_names") as table:
        table.drop_column("tokens_generation")
