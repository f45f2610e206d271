"""The decision point's storage side: an in-process view of what decisions need, and the decision log.

Decisions must be fast and never wait on a poll, so each process keeps, per server, the current
listing and the approved definitions, and the verdict of each tool once computed. The view is
valid for one *generation* of the database: the newest snapshot, approval event and server ids,
read in one indexed statement per request. A poll that stores a new version, an approval, a
revocation, a mode change or a server registered or deleted on any instance sharing the database
moves the generation, and the next request rebuilds what it needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from monitor.core.decisions import Approved as ApprovedDefinition
from monitor.core.decisions import Verdict, decide
from monitor.core.states import ApprovalMode
from monitor.store.approvals import approved_tools
from monitor.store.models import (
    Approval,
    DecisionRecord,
    Listing,
    ListingTool,
    Server,
    Snapshot,
    ToolDefinition,
)
from monitor.store.records import DecisionLogRecord

Generation = tuple[Any, ...]

_GENERATION = select(
    select(func.max(Snapshot.id)).scalar_subquery(),
    select(func.max(Approval.id)).scalar_subquery(),
    select(func.max(Server.id)).scalar_subquery(),
    select(func.count(Server.id)).scalar_subquery(),
)


@dataclass
class ServerView:
    """What decisions about one server's tools need, read once per generation."""

    server_id: int
    name: str
    mode: ApprovalMode
    current_version: int | None
    current_fingerprint: str | None
    tools: dict[str, tuple[str, dict[str, Any]]]
    """The current listing's tools: name -> (definition fingerprint, definition)."""
    approved: dict[str, tuple[int | None, str, dict[str, Any]]]
    """Approved tools: name -> (version, definition fingerprint, definition)."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def verdict(self, tool: str) -> Verdict:
        cached = self.verdicts.get(tool)
        if cached is not None:
            return cached
        current = self.tools.get(tool)
        approved = self.approved.get(tool)
        verdict = decide(
            tool=tool,
            mode=self.mode,
            current_version=self.current_version,
            current=current[1] if current else None,
            approved=ApprovedDefinition(approved[0], approved[2]) if approved else None,
            approved_fingerprint=approved[1] if approved else None,
            current_fingerprint=current[0] if current else None,
        )
        if len(self.verdicts) < 10_000 or tool in self.tools:  # unknown names cannot grow it unbounded
            self.verdicts[tool] = verdict
        return verdict


def load_server_view(session: Session, server: Server) -> ServerView:
    current = session.execute(
        select(Snapshot.version, Snapshot.listing_id, Listing.fingerprint)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server.id)
        .order_by(Snapshot.version.desc())
        .limit(1)
    ).first()
    tools: dict[str, tuple[str, dict[str, Any]]] = {}
    if current is not None:
        for name, fingerprint, definition in session.execute(
            select(ToolDefinition.name, ToolDefinition.fingerprint, ToolDefinition.definition)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == current.listing_id)
        ):
            tools[name] = (fingerprint, definition)
    approved = {
        name: (tool.version, tool.fingerprint, tool.definition)
        for name, tool in approved_tools(session, server).items()
    }
    return ServerView(
        server_id=server.id,
        name=server.name,
        mode=ApprovalMode(server.approval),
        current_version=current.version if current else None,
        current_fingerprint=current.fingerprint if current else None,
        tools=tools,
        approved=approved,
    )


class DecisionView:
    """Per-process cache of `ServerView`s, valid while the database's generation stays the same."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self._lock = threading.Lock()
        self._generation: Generation | None = None
        self._servers: dict[str, ServerView | None] = {}

    def generation(self) -> Generation:
        with self.engine.connect() as connection:
            return tuple(connection.execute(_GENERATION).one())

    def server(self, name: str) -> ServerView | None:
        """The view of the server named `name` (None: no such server), current as of this call."""
        generation = self.generation()
        with self._lock:
            if generation != self._generation:
                self._servers = {}
                self._generation = generation
            if name in self._servers:
                return self._servers[name]
        with self.sessions() as session:
            row = session.scalar(select(Server).where(Server.name == name))
            view = load_server_view(session, row) if row is not None else None
        with self._lock:
            if self._generation == generation and len(self._servers) < 10_000:
                self._servers[name] = view
        return view


def record_decision(
    session: Session,
    *,
    server_id: int,
    tool: str,
    verdict: Verdict,
    session_id: str | None,
    client: str | None,
    now: datetime,
    keep: int,
) -> DecisionRecord:
    """Keep a non-allow decision for review; the server keeps its newest `keep` (older ones go)."""
    row = DecisionRecord(
        server_id=server_id,
        tool=tool,
        decided_at=now,
        decision=verdict.decision.value,
        reason_code=verdict.reason_code,
        reason=verdict.reason,
        rule=verdict.rule,
        severity=verdict.severity.value if verdict.severity else None,
        approved_version=verdict.approved_version,
        current_version=verdict.current_version,
        stale_listing=verdict.stale_listing,
        session_id=session_id,
        client=client,
    )
    session.add(row)
    session.flush()
    if row.id % 50 == 0:  # trim now and then, not at every insert
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
    return row


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
    progress: Callable[[str, int, int], None] | None = None,
) -> int:
    """Delete kept decisions from before `older_than`, in batches that commit on their own."""
    sessions = sessionmaker(engine)
    old = DecisionRecord.decided_at < older_than
    if dry_run:
        with sessions() as session:
            return int(session.scalar(select(func.count()).select_from(DecisionRecord).where(old)) or 0)
    total = 0
    while True:
        with sessions.begin() as session:
            ids = list(
                session.scalars(
                    select(DecisionRecord.id).where(old).order_by(DecisionRecord.id).limit(batch_size)
                )
            )
            if not ids:
                break
            deleted = (
                session.connection()
                .execute(delete(DecisionRecord).where(DecisionRecord.id.in_(ids)))
                .rowcount
            )
        total += deleted
        if progress is not None:
            progress("decisions", deleted, total)
    return total
