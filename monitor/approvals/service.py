"""Approving, revoking and setting the approval mode: the one service every adapter calls.

The API, the dashboard and the command line build an `ApprovalRequest` (or name a tool to revoke)
and call these functions with who is acting; each failure is one type of
`monitor.approvals.errors`, so every adapter answers it alike. Approving a version's tools accepts
the changes that led to it, so the open alerts those changes raised about the same tools are
resolved (through `monitor.notify.alerts`, the one path, so the webhooks that heard them open hear
them close). Everything runs in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitor.approvals import storage
from monitor.approvals.errors import Conflict, NotFound, Unstorable
from monitor.approvals.records import ApprovalRecord
from monitor.core.ijson import storable
from monitor.core.rules import ABOUT_A_TOOL
from monitor.core.states import AlertState, ApprovalMode, ResolveCause, ServerOrigin
from monitor.core.text import make_visible
from monitor.notify import alerts, lifecycle
from monitor.store import registration
from monitor.store.models import Alert, AlertFinding, FindingRecord, Server, Snapshot

_TOOL_RULE_IDS = [rule.id for rule in ABOUT_A_TOOL]


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person asks to approve: the tools (None: all) of one server as they are in a version."""

    server: str
    version: int | None = None
    """None: the server's current version."""
    tools: Sequence[str] | None = None
    note: str = ""
    resolve_alerts: bool = True
    """Resolve the open alerts that the changes up to this version raised about these tools."""


@dataclass(frozen=True)
class ApprovalResult:
    """What an approval did: the version approved, its events, and the alerts it resolved."""

    version: int
    approvals: list[ApprovalRecord]
    resolved_alerts: list[int]


def approve(
    session: Session, request: ApprovalRequest, *, actor: str, now: datetime, policy: alerts.Alerting
) -> ApprovalResult:
    """Approve the tools' definitions in the request's version; resolve what they answer if asked."""
    _check_storable(*(request.tools or ()), request.note, actor)
    server = locked_server(session, request.server)
    version, events = storage.record_approvals(
        session, server, version=request.version, tools=request.tools, note=request.note, actor=actor, now=now
    )
    resolved: list[int] = []
    if request.resolve_alerts:
        names = [event.tool for event in events if event.tool is not None]
        for alert in alerts_resolved_by(session, server.id, names, version):
            alert.resolved_by, alert.resolve_cause = actor, ResolveCause.APPROVED
            alert.resolve_note = f"approved as in v{version}" + (f": {request.note}" if request.note else "")
            lifecycle.resolve(session, alert, now, policy=policy)
            resolved.append(alert.id)
    ids = {event.id for event in events}
    records = [record for record in storage.history(session, server) if record.id in ids]
    return ApprovalResult(version, records, resolved)


def revoke(
    session: Session, server_name: str, tool: str, *, note: str, actor: str, now: datetime
) -> ApprovalRecord:
    """Withdraw the approval of one tool; the event as recorded."""
    _check_storable(tool, note, actor)
    server = locked_server(session, server_name)
    event = storage.record_revocation(session, server, tool, note=note, actor=actor, now=now)
    return next(record for record in storage.history(session, server, tool) if record.id == event.id)


def set_mode(
    session: Session, server_name: str, mode: ApprovalMode, *, note: str, actor: str, now: datetime
) -> bool:
    """Change an API-registered server's approval mode; False when it already was `mode`. A config
    file's server takes its mode from the file (`Conflict` when asked for another)."""
    _check_storable(note, actor)
    server = locked_server(session, server_name)
    if server.origin == ServerOrigin.CONFIG and server.approval != mode:
        raise Conflict(
            f"server {server_name!r} comes from a config file: set approval = {mode.value!r} there"
        )
    return registration.set_mode(session, server, mode, actor=actor, note=note, now=now)


def locked_server(session: Session, name: str) -> Server:
    """The server's row, locked for the change (its approvals are written one change at a time)."""
    query = select(Server).where(Server.name == name).with_for_update()
    server = session.scalar(query) if storable(name) else None
    if server is None:
        raise NotFound(f"no server named {make_visible(name)!r}")
    return server


def alerts_resolved_by(
    session: Session, server_id: int, tools: Sequence[str] | None, version: int
) -> list[Alert]:
    """Unresolved tool alerts about `tools` (None: any tool) whose findings all lead to `version` or
    an earlier one: the changes a person accepts by approving the tools as in `version`."""
    if tools is not None and not tools:
        return []
    newest_step = (
        select(AlertFinding.alert_id, func.max(Snapshot.version).label("version"))
        .join(FindingRecord, FindingRecord.id == AlertFinding.finding_id)
        .join(Snapshot, Snapshot.id == FindingRecord.to_snapshot_id)
        .group_by(AlertFinding.alert_id)
        .subquery()
    )
    return list(
        session.scalars(
            select(Alert)
            .join(newest_step, newest_step.c.alert_id == Alert.id)
            .where(
                Alert.server_id == server_id,
                Alert.state.in_(AlertState.unresolved()),
                Alert.session_id.is_(None),
                Alert.rule.in_(_TOOL_RULE_IDS),
                Alert.tool.is_not(None) if tools is None else Alert.tool.in_(list(tools)),
                newest_step.c.version <= version,
            )
            .order_by(Alert.id)
        )
    )


def _check_storable(*texts: str) -> None:
    if not all(storable(text) for text in texts):
        raise Unstorable(
            "a tool name, note or name holds characters that cannot be stored (NUL, lone surrogates)"
        )
