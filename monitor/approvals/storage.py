"""The approval history and the kept decisions: what approvals and decisions leave in the database.

Approving records the tool's definition (its content address) in a chosen version; revoking and
changing a server's approval mode are events too, so who approved what, when and why is never
overwritten. The newest event of a tool is its approval state. In `tofu` mode a tool with no event
at all is approved as the server's first version held it (trust on first use), which needs no
write at poll time and holds as well for servers first polled before approvals existed.

Non-allow decisions are kept for review, the newest `decisions_kept` per server, and pruned by age.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, delete, func, insert, select
from sqlalchemy.orm import Session

from monitor.approvals.errors import Conflict, NotFound
from monitor.approvals.policy import ApprovedTool, Verdict
from monitor.approvals.records import ApprovalRecord, DecisionLogRecord
from monitor.core.states import ApprovalAction, ApprovalMode
from monitor.store.access import Approval, DecisionRecord
from monitor.store.generations import decisions_changed
from monitor.store.models import ListingTool, Server, Snapshot, ToolDefinition
from monitor.store.retention import Progress, count_rows, delete_in_batches
from monitor.store.views import decision_views, first_view_tools

TOFU_ACTOR = "trust on first use"


def _version_tools(
    session: Session, server_id: int, version: int | None
) -> tuple[int, dict[str, str], str | None]:
    """The version (None: the current one), its tools' definition fingerprints by name, and its
    instructions' digest; the current version also holds the tools only other client views list
    (as the first of them lists each)."""
    query = select(
        Snapshot.version,
        Snapshot.listing_id,
        Snapshot.first_seen,
        Snapshot.instructions_digest,
        Snapshot.instructions.is_not(None).label("instructed"),
    ).where(Snapshot.server_id == server_id)
    if version is None:
        query = query.order_by(Snapshot.version.desc()).limit(1)
    else:
        query = query.where(Snapshot.version == version)
    row = session.execute(query).first()
    if row is None:
        if version is None:
            raise Conflict("the server has not been polled yet: there is nothing to approve")
        raise NotFound(f"the server has no version {version}")
    tools = dict(
        session.execute(
            select(ToolDefinition.name, ToolDefinition.fingerprint)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == row.listing_id)
        ).all()
    )
    if version is None:  # the current version: tools only other client views list, as the first lists them
        for view in decision_views(session, server_id, row.first_seen):
            for name, (fingerprint, _) in view.tools.items():
                tools.setdefault(name, fingerprint)
    return row.version, tools, row.instructions_digest if row.instructed else None


def _held(version: int, held: dict[str, str], tools: Sequence[str] | None) -> list[str]:
    """The names of `tools` (None: every tool `held`), each once; a tool the version does not hold
    is refused."""
    names = sorted(held) if tools is None else list(dict.fromkeys(tools))
    missing = [name for name in names if name not in held]
    if missing:
        raise NotFound(f"version {version} has no tool named {', '.join(repr(n) for n in missing)}")
    return names


def approvable(session: Session, server_id: int, version: int | None, tools: Sequence[str] | None) -> int:
    """The version approving `tools` (None: all) as in `version` (None: the current one) would
    approve, refused as `record_approvals` would refuse it (`NotFound`, `Conflict`), writing nothing:
    what a confirmation page checks before it asks."""
    approved_version, held, _ = _version_tools(session, server_id, version)
    _held(approved_version, held, tools)
    return approved_version


def record_approvals(
    session: Session,
    server: Server,
    *,
    version: int | None,
    tools: Sequence[str] | None,
    note: str,
    actor: str,
    now: datetime,
) -> tuple[int, list[Approval]]:
    """Approve the definitions of `tools` (None: all, and the version's instructions) as they are in
    `version` (None: the current one).

    Returns the version approved and the events written. A tool the version does not hold is refused.
    The instructions' approval is an event with no tool, naming their digest.
    """
    approved_version, held, instructions = _version_tools(session, server.id, version)
    names = _held(approved_version, held, tools)
    events = [
        Approval(
            server_id=server.id,
            action=ApprovalAction.APPROVE,
            tool=name,
            version=approved_version,
            definition_fingerprint=held[name],
            actor=actor,
            note=note,
            created_at=now,
        )
        for name in names
    ]
    if tools is None and instructions is not None:
        events.append(
            Approval(
                server_id=server.id,
                action=ApprovalAction.APPROVE,
                version=approved_version,
                definition_fingerprint=instructions,
                actor=actor,
                note=note,
                created_at=now,
            )
        )
    decisions_changed(server)
    session.add_all(events)
    session.flush()
    return approved_version, events


def record_revocation(
    session: Session, server: Server, tool: str, *, note: str, actor: str, now: datetime
) -> Approval:
    """Withdraw the approval of one tool: decisions about it are `deny` (`revoked`) until a person
    approves it again."""
    if tool not in approval_state(session, server).approved:
        raise NotFound(f"{tool!r} is not approved")
    event = Approval(
        server_id=server.id, action=ApprovalAction.REVOKE, tool=tool, actor=actor, note=note, created_at=now
    )
    decisions_changed(server)
    session.add(event)
    session.flush()
    return event


@dataclass(frozen=True)
class ApprovalState:
    """What a server's approval history says now: each approved tool's definition, and the tools
    whose approval was revoked (and not given again)."""

    approved: dict[str, ApprovedTool]
    revoked: frozenset[str]
    instructions: frozenset[str] = frozenset()
    """The digests of the instructions a person approved (`record_approvals` with every tool)."""


def approval_state(session: Session, server: Server) -> ApprovalState:
    """The approved definition of every approved tool of the server, and its revoked tools."""
    newest = (
        select(func.max(Approval.id))
        .where(Approval.server_id == server.id, Approval.tool.is_not(None))
        .group_by(Approval.tool)
    )
    rows = session.execute(
        select(Approval.tool, Approval.action, Approval.version, Approval.definition_fingerprint).where(
            Approval.id.in_(newest)
        )
    ).all()
    fingerprints = {row.definition_fingerprint for row in rows if row.action == ApprovalAction.APPROVE}
    definitions = _definitions(session, fingerprints)
    result: dict[str, ApprovedTool] = {}
    decided = set()
    revoked = set()
    for tool, action, version, fingerprint in rows:
        decided.add(tool)
        if tool is not None and action == ApprovalAction.APPROVE and fingerprint in definitions:
            result[tool] = ApprovedTool(version, fingerprint, definitions[fingerprint])
        elif tool is not None and action == ApprovalAction.REVOKE:
            revoked.add(tool)
    if server.approval == ApprovalMode.TOFU:
        first = _first_version_tools(session, server.id)
        for name, (fingerprint, definition) in first.items():
            if name not in decided:
                result[name] = ApprovedTool(1, fingerprint, definition, tofu=True)
        # A tool only some client views list (never the primary's first version) is trusted as those
        # views first listed it, when they agree (docs/approvals.md).
        for name, (fingerprint, definition) in first_view_tools(session, server.id).items():
            if name not in decided and name not in first:
                result[name] = ApprovedTool(None, fingerprint, definition, tofu=True)
    instructions = session.scalars(
        select(Approval.definition_fingerprint).where(
            Approval.server_id == server.id,
            Approval.tool.is_(None),
            Approval.action == ApprovalAction.APPROVE,
            Approval.definition_fingerprint.is_not(None),
        )
    ).all()
    return ApprovalState(result, frozenset(revoked), frozenset(d for d in instructions if d is not None))


def _definitions(session: Session, fingerprints: set[str]) -> dict[str, dict[str, Any]]:
    if not fingerprints:
        return {}
    return dict(
        session.execute(
            select(ToolDefinition.fingerprint, ToolDefinition.definition).where(
                ToolDefinition.fingerprint.in_(sorted(fingerprints))
            )
        ).all()
    )


def _first_version_tools(session: Session, server_id: int) -> dict[str, tuple[str, dict[str, Any]]]:
    rows = session.execute(
        select(ToolDefinition.name, ToolDefinition.fingerprint, ToolDefinition.definition)
        .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
        .join(Snapshot, Snapshot.listing_id == ListingTool.listing_id)
        .where(Snapshot.server_id == server_id, Snapshot.version == 1)
    ).all()
    return {name: (fingerprint, definition) for name, fingerprint, definition in rows}


def history(session: Session, server: Server, tool: str | None = None) -> list[ApprovalRecord]:
    """Every approval event of the server (or of one tool, with the mode changes), newest first; under
    tofu, the trust given on first use to the first version's tools appears as the oldest events."""
    query = select(Approval).where(Approval.server_id == server.id)
    if tool is not None:
        query = query.where((Approval.tool == tool) | Approval.tool.is_(None))
    records = [
        ApprovalRecord(
            id=event.id,
            server=server.name,
            action=ApprovalAction(event.action),
            tool=event.tool,
            version=event.version,
            definition_fingerprint=event.definition_fingerprint,
            mode=ApprovalMode(event.mode) if event.mode else None,
            actor=event.actor,
            note=event.note,
            at=event.created_at,
        )
        for event in session.scalars(query.order_by(Approval.id.desc()))
    ]
    if server.approval == ApprovalMode.TOFU:
        first_seen = session.scalar(
            select(Snapshot.first_seen).where(Snapshot.server_id == server.id, Snapshot.version == 1)
        )
        for name, (fingerprint, _) in sorted(_first_version_tools(session, server.id).items()):
            if (tool is None or name == tool) and first_seen is not None:
                records.append(
                    ApprovalRecord(
                        id=None,
                        server=server.name,
                        action=ApprovalAction.APPROVE,
                        tool=name,
                        version=1,
                        definition_fingerprint=fingerprint,
                        mode=None,
                        actor=TOFU_ACTOR,
                        note="approved automatically: the first version seen (approval mode tofu)",
                        at=first_seen,
                    )
                )
    return records


@dataclass(frozen=True)
class KeptDecision:
    """A non-allow decision to keep for review."""

    server_id: int
    tool: str
    verdict: Verdict
    session_id: str | None
    client: str | None
    at: datetime


def record_decisions(session: Session, decisions: Sequence[KeptDecision], *, keep: int) -> None:
    """Keep non-allow decisions for review, in one statement; each of their servers keeps its newest
    `keep` (older ones go)."""
    if not decisions:
        return
    session.execute(
        insert(DecisionRecord),
        [
            {
                "server_id": kept.server_id,
                "tool": kept.tool,
                "decided_at": kept.at,
                "decision": kept.verdict.decision.value,
                "reason_code": kept.verdict.reason_code,
                "reason": kept.verdict.reason,
                "rule": kept.verdict.rule,
                "severity": kept.verdict.severity.value if kept.verdict.severity else None,
                "approved_version": kept.verdict.approved_version,
                "current_version": kept.verdict.current_version,
                "stale_listing": kept.verdict.stale_listing,
                "session_id": kept.session_id,
                "client": kept.client,
            }
            for kept in decisions
        ],
    )
    for server_id in sorted({kept.server_id for kept in decisions}):
        cutoff = session.scalar(
            select(DecisionRecord.id)
            .where(DecisionRecord.server_id == server_id)
            .order_by(DecisionRecord.id.desc())
            .offset(keep)
            .limit(1)
        )
        if cutoff is not None:
            session.execute(
                delete(DecisionRecord).where(
                    DecisionRecord.server_id == server_id, DecisionRecord.id <= cutoff
                )
            )


def recent_decisions(session: Session, server_id: int, limit: int = 20) -> list[DecisionLogRecord]:
    rows = session.execute(
        select(DecisionRecord, Server.name)
        .join(Server, Server.id == DecisionRecord.server_id)
        .where(DecisionRecord.server_id == server_id)
        .order_by(DecisionRecord.id.desc())
        .limit(limit)
    ).all()
    return [_record(row, name) for row, name in rows]


def _record(row: DecisionRecord, server: str) -> DecisionLogRecord:
    columns = {name: getattr(row, name) for name in DecisionLogRecord.model_fields if hasattr(row, name)}
    return DecisionLogRecord.model_validate({**columns, "server": server})


def prune_decisions(
    engine: Engine,
    *,
    older_than: datetime,
    batch_size: int = 5000,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> int:
    """Delete kept decisions from before `older_than`, in batches that commit on their own."""
    old = DecisionRecord.decided_at < older_than
    if dry_run:
        return count_rows(engine, DecisionRecord, old)

    def decisions(connection: Connection, chosen: Sequence[ColumnElement[bool]]) -> dict[str, int]:
        return {"decisions": connection.execute(delete(DecisionRecord).where(*chosen)).rowcount}

    deleted = delete_in_batches(
        engine, DecisionRecord.id, old, decisions, batch_size=batch_size, progress=progress
    )
    return deleted.get("decisions", 0)
