"""The tables of who may do what and what they did: the approval history, kept decisions, the
names hosts asked about that nobody monitors, named tokens (their hashes only), the audit log and
the key that signs dashboard sessions.

They live beside the monitor's own tables (`monitor.store.models`) so that the schema is whole in
the store, whatever concept uses them; the migrations create them like every table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from monitor.store.columns import SafeText
from monitor.store.models import Base


class Approval(Base):
    """One event of the approval history, kept forever: a tool approved as one definition, a tool's
    approval revoked, or the server's approval mode changed (`tool` NULL). The newest event of a
    tool is its approval state."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(10))
    """approve, revoke or mode."""
    tool: Mapped[str | None] = mapped_column(SafeText)
    version: Mapped[int | None]
    """The server version whose definition of the tool was approved."""
    definition_fingerprint: Mapped[str | None] = mapped_column(String(64))
    """The approved definition (a `tool_definitions` fingerprint)."""
    mode: Mapped[str | None] = mapped_column(String(10))
    """For a mode event: the new mode."""
    actor: Mapped[str] = mapped_column(SafeText)
    note: Mapped[str] = mapped_column(SafeText)
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_approvals_server_id_tool_id", "server_id", "tool", "id"),)


class DecisionRecord(Base):
    """A non-allow answer of the decision point, kept for review (the newest few per server)."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(primary_key=True)
    server_id: Mapped[int] = mapped_column(ForeignKey("servers.id", ondelete="CASCADE"))
    tool: Mapped[str] = mapped_column(SafeText)
    decided_at: Mapped[datetime]
    decision: Mapped[str] = mapped_column(String(5))
    reason_code: Mapped[str] = mapped_column(String(40))
    reason: Mapped[str] = mapped_column(SafeText)
    rule: Mapped[str | None] = mapped_column(String(64))
    severity: Mapped[str | None] = mapped_column(String(10))
    approved_version: Mapped[int | None]
    current_version: Mapped[int | None]
    stale_listing: Mapped[bool] = mapped_column(Boolean)
    session_id: Mapped[str | None] = mapped_column(String(200))
    client: Mapped[str | None] = mapped_column(SafeText)

    __table_args__ = (
        Index("ix_decisions_server_id_id", "server_id", "id"),
        Index("ix_decisions_decided_at", "decided_at"),
    )


class UnmonitoredServer(Base):
    """A server name a host asked a decision about that no monitored server has: a gap to close."""

    __tablename__ = "unmonitored_servers"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    host: Mapped[str] = mapped_column(String(40), primary_key=True)
    """Which adapter asked (`claude-code`, `toolhive`, ...)."""
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    calls: Mapped[int] = mapped_column(BigInteger)


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
    """How the actor was identified (`monitor.core.roles.Via`)."""
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
