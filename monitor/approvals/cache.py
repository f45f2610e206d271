"""The decision cache: what decisions need, kept per process and checked in commit order.

Decisions must be fast and never wait on a poll, so each process keeps, per server, the current
listing and the approved definitions, and the verdict of each tool once computed. At every decision
one indexed statement reads the server's row: its `decision_generation` (moved by every transaction
that changes a version, an approval, a revocation or a mode, on any instance) says whether the kept
view is still the server's, and the same row gives what changes with every poll and is never kept:
when the listing was last verified, and whether the newest answer was refused. The statement also
reads the generation of the server names (moved when a server is registered or deleted, or its
aliases change), which says whether the kept names are current. A counter moves when its
transaction commits, so a cache that compares it follows commit order on both databases
(`monitor.store.generations`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from monitor.approvals.policy import ApprovedTool, Verdict, decide, poisoned_instructions
from monitor.approvals.storage import approval_state
from monitor.core.clients import matching_view
from monitor.core.findings import Finding
from monitor.core.states import ApprovalMode
from monitor.store.models import DecisionNames, Listing, ListingTool, Server, Snapshot, ToolDefinition
from monitor.store.statereads import ServerRow, StateReads
from monitor.store.views import ViewListing, decision_views

MAX_KEPT = 10_000
"""Servers (and verdicts per server) kept at most: names nobody monitors cannot grow memory."""
BUILDERS = 16
"""Views built at once at most (a server's name picks its lock): more than the lane's threads."""


@dataclass(frozen=True)
class ServerState:
    """What a decision reads of a server's row every time: what every poll may change."""

    server_id: int
    name: str
    generation: int
    last_verified: datetime | None
    """The server's last successful poll."""
    last_polled: datetime | None
    unverifiable_reason: str | None
    interval_seconds: float | None


@dataclass
class ServerView:
    """What decisions about one server's tools need, read once per generation of the server.

    A server polled as several client profiles (docs/clients.md) may show each a different listing.
    A host's decision is judged on the view that declared the host's capabilities when the host said
    them, else on every view that lists the tool, the strictest answer winning: the monitor fails
    closed on a listing it cannot tell the host holds."""

    server_id: int
    name: str
    mode: ApprovalMode
    current_version: int | None
    current_fingerprint: str | None
    tools: dict[str, tuple[str, dict[str, Any]]]
    """The current listing's tools (the primary view's): name -> (definition fingerprint, definition)."""
    approved: dict[str, ApprovedTool]
    revoked: frozenset[str]
    views: tuple[ViewListing, ...] = ()
    """Every client view's current listing (empty: the server is polled as one client only)."""
    instructions: Finding | None = None
    """The worst content finding of the server's instructions while no person approved them."""
    verdicts: dict[tuple[str, str], Verdict] = field(default_factory=dict)

    def verdict(
        self, tool: str, declared: Mapping[str, Any] | None = None, client: str | None = None
    ) -> Verdict:
        """The answer about `tool` for a host that declared `declared` capabilities (None: unknown)."""
        matched = self.matching(declared, client)
        key = (matched.profile if matched else "", tool)
        cached = self.verdicts.get(key)
        if cached is not None:
            return cached
        if matched is not None:  # a tool the host's view does not list is unknown to that host
            verdict = self._judged(tool, matched.tools, approved=tool in matched.tools)
        else:
            listings = [self.tools, *(view.tools for view in self.views)]
            holding = [tools for tools in listings if tool in tools] or [self.tools]
            verdict = max(
                (self._judged(tool, tools) for tools in holding), key=lambda v: v.decision.strictness
            )
        if len(self.verdicts) < 10_000 or tool in self.tools:  # unknown names cannot grow it unbounded
            self.verdicts[key] = verdict
        return verdict

    def matching(self, declared: Mapping[str, Any] | None, client: str | None) -> ViewListing | None:
        """The view that declared what the host declared (None: unknown, or no such view)."""
        return matching_view([(view, view.client) for view in self.views], declared, client)

    def holds(self, fingerprint: str, declared: Mapping[str, Any] | None, client: str | None) -> bool:
        """Whether a host holding the listing `fingerprint` holds a current listing of the server: the
        matching view's, or (capabilities unknown) the primary's or any view's."""
        matched = self.matching(declared, client)
        if matched is not None:
            return matched.fingerprint == fingerprint
        return fingerprint == self.current_fingerprint or any(
            v.fingerprint == fingerprint for v in self.views
        )

    def _judged(
        self, tool: str, tools: Mapping[str, tuple[str, dict[str, Any]]], *, approved: bool = True
    ) -> Verdict:
        current = tools.get(tool)
        return decide(
            tool=tool,
            mode=self.mode,
            current_version=self.current_version,
            current=current[1] if current else None,
            current_fingerprint=current[0] if current else None,
            approved=self.approved.get(tool) if approved else None,
            revoked=tool in self.revoked,
            instructions=self.instructions,
        )


def load_server_view(session: Session, server: Server) -> ServerView:
    current = session.execute(
        select(
            Snapshot.version,
            Snapshot.listing_id,
            Snapshot.first_seen,
            Listing.fingerprint,
            Snapshot.instructions,
            Snapshot.instructions_digest,
        )
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server.id)
        .order_by(Snapshot.version.desc())
        .limit(1)
    ).first()
    tools: dict[str, tuple[str, dict[str, Any]]] = {}
    views: list[ViewListing] = []
    if current is not None:
        for name, fingerprint, definition in session.execute(
            select(ToolDefinition.name, ToolDefinition.fingerprint, ToolDefinition.definition)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == current.listing_id)
        ):
            tools[name] = (fingerprint, definition)
        views = decision_views(session, server.id, current.first_seen)
    approvals = approval_state(session, server)
    instructions = None
    if (
        current is not None
        and current.instructions
        and current.instructions_digest not in approvals.instructions
    ):
        instructions = poisoned_instructions(server.name, current.instructions)
    return ServerView(
        server_id=server.id,
        name=server.name,
        mode=ApprovalMode(server.approval),
        current_version=current.version if current else None,
        current_fingerprint=current.fingerprint if current else None,
        tools=tools,
        approved=approvals.approved,
        revoked=approvals.revoked,
        views=tuple(views) if len(views) > 1 else (),
        instructions=instructions,
    )


@dataclass(frozen=True)
class Lookup:
    """A server looked up at one decision: its kept view and its state now (None: no such server),
    and the generation of the server names at that moment."""

    names_generation: int
    view: ServerView | None = None
    state: ServerState | None = None


class NotReady(Exception):
    """A decision asked `inline` needs more than the statement every decision runs (a view or the names
    to read again, a poll to wait for): it is asked again on the decision lane's threads."""


INLINE: ContextVar[bool] = ContextVar("decision_inline", default=False)
"""Set while a decision runs on the event loop (`monitor.approvals.fastpath`): there, the cache's
answer and the one statement are all it may wait for; anything more raises `NotReady` before the
decision has counted or recorded anything."""


class DecisionView:
    """Per-process cache of `ServerView`s and of the server names, each checked at every decision."""

    def __init__(self, engine: Engine, reads: StateReads | None = None) -> None:
        self.engine = engine
        self.reads = reads or StateReads(engine)
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self._lock = threading.Lock()
        self._builders = [threading.Lock() for _ in range(BUILDERS)]
        """Under a burst about a server whose version just moved, every call would build its view:
        one builds it, the others wait for it and use it."""
        self._views: dict[str, tuple[int, ServerView]] = {}
        self._states: dict[str, tuple[ServerRow, ServerState]] = {}
        self._names: tuple[int, dict[str, list[str]]] | None = None

    def server(self, name: str, session: Session | None = None) -> Lookup:
        """The server named `name`: one indexed statement (`monitor.store.statereads`), and the view
        rebuilt only when its generation moved since it was kept. Read in `session` when one is given
        (a page's request holds a connection already)."""
        generations, row = self.reads.server(name, session)
        if row is None:
            return Lookup(generations.names)
        with self._lock:
            kept = self._views.get(name)
            known = self._states.get(name)
        if known is not None and known[0] is row:  # the same read handed back: nothing changed
            state = known[1]
        else:
            state = ServerState(
                row.server_id,
                name,
                row.generation,
                row.last_verified,
                row.last_polled,
                row.unverifiable_reason,
                row.interval_seconds,
            )
            with self._lock:
                if name in self._states or len(self._states) < MAX_KEPT:
                    self._states[name] = (row, state)
        if kept is not None and kept[0] == state.generation:
            return Lookup(generations.names, kept[1], state)
        if INLINE.get():
            raise NotReady(name)
        if session is not None:  # a page: its own reading, on the connection it holds
            return self._build(name, generations.names, state, session)
        with self._builders[hash(name) % len(self._builders)]:  # one build of a server at a time
            with self._lock:
                kept = self._views.get(name)
            if kept is not None and kept[0] == state.generation:  # built while this one waited
                return Lookup(generations.names, kept[1], state)
            return self._build(name, generations.names, state, None)

    def _build(self, name: str, names_generation: int, state: ServerState, session: Session | None) -> Lookup:
        with self._reading(session) as reading:
            server = reading.get(Server, state.server_id)
            if server is None:
                return Lookup(names_generation)
            view = load_server_view(reading, server)
        with self._lock:
            if name in self._views or len(self._views) < MAX_KEPT:
                self._views[name] = (state.generation, view)
        return Lookup(names_generation, view, state)

    @contextmanager
    def _reading(self, session: Session | None) -> Iterator[Session]:
        if session is not None:
            yield session
            return
        with self.sessions() as own:
            yield own

    def names(self, *, refresh: bool = False) -> tuple[int, dict[str, list[str]]]:
        """Every monitored server's name -> its aliases set over the API, and their generation: the
        kept ones, or read again (`refresh`, when a lookup saw that they changed)."""
        with self._lock:
            kept = self._names
        if kept is not None and not refresh:
            return kept
        if INLINE.get():
            raise NotReady("the server names")
        with self.sessions() as session:
            current = int(session.scalar(select(DecisionNames.generation).where(DecisionNames.id == 1)) or 0)
            rows = session.execute(select(Server.name, Server.aliases)).all()
        names = {name: [str(a) for a in aliases or ()] for name, aliases in rows}
        with self._lock:
            if self._names is None or self._names[0] <= current:
                self._names = (current, names)
        return current, names

    def names_generation(self) -> int:
        """The names' generation now (one statement), for a name no kept name matched."""
        return self.reads.generations().names
