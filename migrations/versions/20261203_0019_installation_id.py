"""installation id: this database's identity, made once and kept

- `installation`: one row, a random UUID made when this migration runs. Alert sinks that several
  monitors may share (one PagerDuty service, two environments or a rebuilt database) key their
  alerts by it, so alert 1 of one database is not alert 1 of another.
- `first_keyed_alert`: the alert id after the newest alert at upgrade time. Alerts numbered below it
  were announced to receivers under their bare id before this revision, so they keep that key: an
  incident opened before the upgrade is still acknowledged and resolved after it.

CREATE TABLE and one INSERT on both databases. Downgrading drops the table; upgrading again makes a
new id.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    installation = op.create_table(
        "installation",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_keyed_alert", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_installation")),
    )
    newest = op.get_bind().execute(sa.text("SELECT max(id) FROM alerts")).scalar()
    op.bulk_insert(
        installation,
        [{"id": str(uuid.uuid4()), "created_at": datetime.now(UTC), "first_keyed_alert": (newest or 0) + 1}],
    )


def downgrade() -> None:
    op.drop_table("installation")
