"""_meta per version: each version keeps its tools' `_meta` as its server sent them

- `snapshots.metas`: tool name -> `_meta`, as this server last sent it for this version, and
  `snapshots.metas_digest`, the SHA-256 that tells a poll whether it changed (a change is
  recorded as `meta-changed`).
- `listing_tools.meta` goes: a listing is content-addressed and shared by every server that
  serves it, so the `_meta` kept there was the first server's, shown for every other one.

Versions stored before have no `metas` until their next poll fills them in (no finding then).
Plain ADD and DROP COLUMN on both databases (SQLite 3.35 or later drops a column in place).
Downgrading drops the new columns and brings back an empty `listing_tools.meta`.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.add_column("snapshots", sa.Column("metas", JSON, nullable=True))
    op.add_column("snapshots", sa.Column("metas_digest", sa.String(length=64), nullable=True))
    op.drop_column("listing_tools", "meta")


def downgrade() -> None:
    op.add_column("listing_tools", sa.Column("meta", JSON, nullable=True))
    op.drop_column("snapshots", "metas_digest")
    op.drop_column("snapshots", "metas")
