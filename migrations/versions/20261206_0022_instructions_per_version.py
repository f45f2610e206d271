"""instructions per version: each version keeps the instructions its server gave hosts

- `snapshots.instructions`: `InitializeResult.instructions` (or the 2026-07-28 discover result's),
  which hosts put into the model's context for every session, as this server last sent them for
  this version (outside the tool fingerprint, like `_meta`); NULL when it sent none.
- `snapshots.instructions_digest`: the SHA-256 that tells a poll whether they changed (a change is
  recorded as `instructions-changed`, and the content rules judge what it adds).

Versions stored before have no instructions until their next poll fills them in (no finding then).
Plain ADD and DROP COLUMN on both databases.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("instructions", sa.Text(), nullable=True))
    op.add_column("snapshots", sa.Column("instructions_digest", sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column("snapshots", "instructions_digest")
    op.drop_column("snapshots", "instructions")
