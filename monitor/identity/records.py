"""The record shapes of identity: a token as listed (never its secret) and an audit event."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from monitor.core.roles import Role
from monitor.store.records import Record


class TokenRecord(Record):
    """A named token: its role and history. The secret is shown once, when it is made, and kept only
    as a hash."""

    name: str
    role: Role
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    last_used_at: datetime | None = Field(description="Within a minute: uses are recorded at most that often")
    revoked_at: datetime | None
    revoked_by: str | None


class AuditRecord(Record):
    """One change or refused attempt, as recorded; never edited."""

    id: int
    at: datetime
    actor: str = Field(description="The authenticated name; for a refused attempt, who it claimed to be")
    role: str | None
    via: str = Field(description="How the actor was identified: token, session, proxy, command line, ...")
    source: str = Field(description="The client's address, or `command line`")
    action: str = Field(description="What was done or tried, e.g. `approval.approve`, `auth.refused`")
    target: str
    result: str = Field(description="`ok`, `refused` or `failed`")
    detail: Any | None = None
