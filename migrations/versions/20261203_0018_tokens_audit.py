"""identity: named API tokens with roles (only their hashes), the audit log, the key signing sessions

- `api_tokens`: a name, a role (`decide`, `viewer`, `responder`, `approver`, `admin`), the SHA-256
  of the secret (never the secret), who made it, expiry, last use, revocation.
- `audit_events`: every change and every refused attempt, who, what, when, from where, the result;
  rows are only ever added (and pruned by age with `drift-monitor prune`).
- `web_keys`: one random key, made on first use, that signs dashboard sessions, CSRF tokens and
  messages after an action, so every instance sharing the database agrees on them.

Only CREATE TABLE: nothing of the 0017 schema changes, and the configured API token keeps working
as the token `config` (admin).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_api_tokens_secret_hash")),
    )
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=True),
        sa.Column("via", sa.String(length=20), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=80), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("result", sa.String(length=20), nullable=False),
        sa.Column("detail", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_events_at"), ["at"], unique=False)
    op.create_table(
        "web_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.LargeBinary(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_keys")),
    )


def downgrade() -> None:
    op.drop_table("web_keys")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_events_at"))
    op.drop_table("audit_events")
    op.drop_table("api_tokens")
