"""The identity unit's tables: named tokens (their hashes only), the audit log, the signing key."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from monitor.store.models import Base


class ApiToken(Base):
    """A named token with a role. Only the SHA-256 of its secret is kept: the secret is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    role: Mapped[str] = mapped_column(String(20))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    revoked_by: Mapped[str | None] = mapped_column(Text)


class AuditEvent(Base):
    """One change or refused attempt: who, what, when, from where, the result. Only ever added."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(Text)
    role: Mapped[str | None] = mapped_column(String(20))
    via: Mapped[str] = mapped_column(String(20))
    """How the actor was identified (`monitor.identity.roles.Via`)."""
    source: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(80))
    target: Mapped[str] = mapped_column(Text)
    result: Mapped[str] = mapped_column(String(20))
    detail: Mapped[Any | None]

    __table_args__ = (Index("ix_audit_events_at", "at"),)


class WebKey(Base):
    """The random key that signs dashboard sessions, CSRF tokens and messages: made once, shared by
    every instance on the database."""

    __tablename__ = "web_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[bytes] = mapped_column(LargeBinary(32))
