"""resolve cause: why each alert was resolved

- `alerts.resolve_cause`: `cleared` (the monitor found the condition gone), `by-hand` (a person, with
  a note), `approved` (a person approved the definition it was about) or `silenced` (a person
  silenced what it matches); NULL while unresolved. Rows resolved before this revision take the
  cause their other columns record: no one named, cleared; a note an approval wrote
  ("approved as in vN"), approved; else by hand.

ALTER TABLE ADD COLUMN and one UPDATE on both databases; downgrading drops the column.

Revision ID: 0021
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("alerts", sa.Column("resolve_cause", sa.String(length=16), nullable=True))
    op.execute(
        "UPDATE alerts SET resolve_cause = CASE"
        " WHEN resolved_by IS NULL THEN 'cleared'"
        " WHEN resolve_note LIKE 'approved as in v%' THEN 'approved'"
        " ELSE 'by-hand' END"
        " WHERE state = 'resolved'"
    )


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_column("resolve_cause")
