"""decision point fails closed: per-server decision generation, refused answers, aliases, unmonitored names

- `servers.decision_generation`: moved by every transaction that changes what a decision about the
  server's tools rests on (a new version, an approval, a revocation, a mode). A process's decision
  cache compares it at each decision, so the cache follows commit order on both databases (ids are
  handed out at insert, not at commit).
- `servers.unverifiable_since` and `unverifiable_reason`: the server answered, but with a listing
  the monitor refused to store; every decision about it is `deny` until a valid listing arrives.
- `servers.aliases`: other names hosts know the server by, set over the API (config servers list
  theirs in the config file).
- `decision_names`: one row whose `generation` moves with every server registered, deleted or
  renamed by an alias, so that name look-ups also follow commit order.
- `unmonitored_servers`: names hosts asked about that match no monitored server, so gaps are seen.

Plain ADD COLUMN and CREATE TABLE on both databases: no table is copied.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "servers", sa.Column("decision_generation", sa.BigInteger(), server_default="0", nullable=False)
    )
    op.add_column("servers", sa.Column("unverifiable_since", sa.DateTime(timezone=True), nullable=True))
    op.add_column("servers", sa.Column("unverifiable_reason", sa.Text(), nullable=True))
    op.add_column("servers", sa.Column("aliases", JSON, nullable=True))
    names = op.create_table(
        "decision_names",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision_names")),
    )
    op.bulk_insert(names, [{"id": 1, "generation": 0}])
    op.create_table(
        "unmonitored_servers",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("host", sa.String(length=40), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "host", name=op.f("pk_unmonitored_servers")),
    )


def downgrade() -> None:
    op.drop_table("unmonitored_servers")
    op.drop_table("decision_names")
    op.drop_column("servers", "aliases")
    op.drop_column("servers", "unverifiable_reason")
    op.drop_column("servers", "unverifiable_since")
    op.drop_column("servers", "decision_generation")
