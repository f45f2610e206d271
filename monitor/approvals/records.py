"""The record shapes of approvals and decisions (the read side's `Record`, defined once here)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from monitor.core.findings import Severity
from monitor.core.states import ApprovalAction, ApprovalMode, DecisionKind
from monitor.store.records import Record


class ApprovalRecord(Record):
    """One event of a server's approval history: who approved or revoked which tool, or changed the
    mode, when and why. Kept forever."""

    id: int | None = Field(description="Null for the trust given on first use, which is not an event")
    server: str
    action: ApprovalAction
    tool: str | None = Field(description="Null for a change of the approval mode")
    version: int | None = Field(description="The server version whose definition was approved")
    definition_fingerprint: str | None = Field(description="SHA-256 of the approved tool definition")
    mode: ApprovalMode | None = Field(description="The new approval mode, for a mode change")
    actor: str = Field(description="Who: the dashboard, the API, the command line (with the user), or tofu")
    note: str
    at: datetime


class DecisionLogRecord(Record):
    """A kept (non-allow) answer of the decision point."""

    id: int
    server: str
    tool: str
    decided_at: datetime
    decision: DecisionKind
    reason_code: str
    reason: str
    rule: str | None
    severity: Severity | None
    approved_version: int | None
    current_version: int | None
    stale_listing: bool
    session_id: str | None
    client: str | None
