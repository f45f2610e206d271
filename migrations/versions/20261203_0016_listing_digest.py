"""listing digest: each version keeps the digest of a JSON text its listing was polled as

Also marks the servers whose `listing-flapping` alert may be open (`flapping_alert_possible`): those
with one open now; from then on the transaction that opens one sets it.

Plain ADD and DROP COLUMN on both databases (SQLite 3.35 or later drops a column in place): no
table is copied, and on SQLite, whose foreign keys are enforced, a copied `servers` table would
take every row that cascades from it along when the old one is dropped.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable and without a default: versions stored before have none (their next poll's text
    # fills it in), and adding such a column rewrites no row on either database.
    op.add_column("snapshots", sa.Column("listing_digest", sa.LargeBinary(length=32), nullable=True))
    # A literal default (not an expression) is what SQLite can add in place.
    op.add_column(
        "servers", sa.Column("flapping_alert_possible", sa.Boolean(), server_default="0", nullable=False)
    )
    # An alert is open while it holds its open key (resolving one clears it).
    op.execute(
        "UPDATE servers SET flapping_alert_possible = true WHERE id IN (SELECT server_id FROM alerts"
        " WHERE rule = 'listing-flapping' AND open_key IS NOT NULL)"
    )


def downgrade() -> None:
    op.drop_column("servers", "flapping_alert_possible")
    op.drop_column("snapshots", "listing_digest")
