"""The approvals unit's tables: the approval history, kept decisions, and
the names hosts asked about that nobody monitors. Created by the migrations like every table
(`monitor.store.schema` gathers every model for them and for the test that compares)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, String
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
