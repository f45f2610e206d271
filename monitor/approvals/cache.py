"""The decision cache: an in-process view of what decisions need, valid for one database generation.

Decisions must be fast and never wait on a poll, so each process keeps, per server, the current
listing and the approved definitions, and the verdict of each tool once computed. The view is
valid for one *generation* of the database: the newest snapshot, approval event and server ids,
read in one indexed statement per request. A poll that stores a new version, an approval, a
revocation, a mode change or a server registered or deleted on any instance sharing the database
moves the generation, and the next request rebuilds what it needs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from monitor.approvals.policy import ApprovedTool, Verdict, decide
from monitor.approvals.storage import approved_tools
from monitor.core.states import ApprovalMode
from monitor.store.models import Approval, Listing, ListingTool, Server, Snapshot, ToolDefinition

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
    approved: dict[str, ApprovedTool]
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def verdict(self, tool: str) -> Verdict:
        cached = self.verdicts.get(tool)
        if cached is not None:
            return cached
        current = self.tools.get(tool)
        verdict = decide(
            tool=tool,
            mode=self.mode,
            current_version=self.current_version,
            current=current[1] if current else None,
            current_fingerprint=current[0] if current else None,
            approved=self.approved.get(tool),
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
    return ServerView(
        server_id=server.id,
        name=server.name,
        mode=ApprovalMode(server.approval),
        current_version=current.version if current else None,
        current_fingerprint=current.fingerprint if current else None,
        tools=tools,
        approved=approved_tools(session, server),
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
