"""Host sessions: what listing each long-lived host or gateway session still acts on.

Hosts cache `tools/list` at connect time. A session that still holds last week's fingerprint
keeps gating (or not gating) tools by last week's claims, so the monitor compares every
reported session with the server's current listing (the client view matching the capabilities
the host declared, when it said) and raises `session-stale`, past the grace period or the
listing's `ttlMs` if longer, with the severity of the worst change the session missed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, func, select
from sqlalchemy.orm import Session

from monitor.core.clients import matching_view
from monitor.core.diff import diff_listings
from monitor.core.findings import Finding
from monitor.core.fingerprint import NotIJSONError
from monitor.core.fingerprint import fingerprint as listing_fingerprint
from monitor.core.listing import ListingError, validate_tools
from monitor.core.rules import servers as rules
from monitor.notify import alerts, lifecycle
from monitor.store.db import insert
from monitor.store.models import (
    ClientView,
    HostSession,
    Listing,
    ListingTool,
    Server,
    Snapshot,
    ToolDefinition,
)
from monitor.store.records import SessionRecord
from monitor.store.views import current_views


class SessionError(ValueError):
    """A report the monitor cannot use; the message says why (for a 404 or 422)."""


class UnknownServer(SessionError):
    pass


def _server(session: Session, name: str) -> Server:
    server = session.scalar(select(Server).where(Server.name == name))
    if server is None:
        raise UnknownServer(f"no server named {name!r}")
    return server


def _reported_fingerprint(fingerprint: str | None, tools: list[dict[str, Any]] | None) -> str | None:
    if tools is not None:
        try:
            return listing_fingerprint(validate_tools(tools))
        except (ListingError, NotIJSONError) as exc:
            raise SessionError(f"tools: {exc}") from None
    if fingerprint is not None and (
        len(fingerprint) != 64 or any(c not in "0123456789abcdef" for c in fingerprint)
    ):
        raise SessionError("fingerprint: expected 64 lowercase hex characters (a SHA-256)")
    return fingerprint


def register_session(
    session: Session,
    *,
    server: str,
    session_id: str,
    client: str | None,
    connected_at: datetime,
    fingerprint: str | None,
    tools: list[dict[str, Any]] | None,
    now: datetime,
    client_capabilities: dict[str, Any] | None = None,
) -> HostSession:
    """Create or replace the report of one session; it must carry a fingerprint or the tools.

    `client_capabilities`, what the host declared to the server, picks the client view the
    session is compared with (a server may show hosts that declare sampling more tools)."""
    reported = _reported_fingerprint(fingerprint, tools)
    if reported is None:
        raise SessionError("a session report needs a fingerprint or the tools it cached")
    row = _server(session, server)
    host = session.scalar(
        select(HostSession).where(HostSession.server_id == row.id, HostSession.session_id == session_id)
    )
    if host is None:
        host = HostSession(server_id=row.id, session_id=session_id)
        session.add(host)
    host.client = client
    host.client_capabilities = client_capabilities
    host.connected_at = connected_at
    host.last_heartbeat_at = now
    if host.fingerprint != reported:
        host.fingerprint = reported
        host.fingerprint_since = now
    session.flush()
    return host


def heartbeat(
    session: Session,
    *,
    server: str,
    session_id: str,
    fingerprint: str | None,
    tools: list[dict[str, Any]] | None,
    now: datetime,
) -> HostSession | None:
    """Keep a session alive, optionally with the fingerprint of a listing it re-fetched."""
    row = _server(session, server)
    host = session.scalar(
        select(HostSession).where(HostSession.server_id == row.id, HostSession.session_id == session_id)
    )
    if host is None:
        return None
    host.last_heartbeat_at = now
    reported = _reported_fingerprint(fingerprint, tools)
    if reported is not None and reported != host.fingerprint:
        host.fingerprint = reported
        host.fingerprint_since = now
    session.flush()
    return host


@dataclass(frozen=True)
class Beat:
    """A host session seen through a decision: registered the first time, heart-beaten after."""

    server_id: int
    session_id: str
    client: str | None
    fingerprint: str
    at: datetime


def record_beats(session: Session, beats: Sequence[Beat]) -> None:
    """Register or heart-beat many sessions with one statement (an upsert on the session's key), as
    `register_session` and `heartbeat` would one by one: a new session starts now with its client; a
    known one keeps its client and start, and its `fingerprint_since` unless the fingerprint changed.
    The newest beat of a session counts (a statement may not touch one row twice)."""
    newest: dict[tuple[int, str], Beat] = {}
    for beat in sorted(beats, key=lambda b: b.at):
        newest[beat.server_id, beat.session_id] = beat
    if not newest:
        return
    statement = insert(session)(HostSession)
    new = statement.excluded
    upsert = statement.on_conflict_do_update(
        index_elements=["server_id", "session_id"],
        set_={
            "last_heartbeat_at": new.last_heartbeat_at,
            "fingerprint": new.fingerprint,
            "fingerprint_since": case(
                (HostSession.fingerprint == new.fingerprint, HostSession.fingerprint_since),
                else_=new.fingerprint_since,
            ),
        },
    )
    session.execute(  # one statement, run for every session: compiled once, whatever the batch's size
        upsert,
        [
            {
                "server_id": beat.server_id,
                "session_id": beat.session_id,
                "client": beat.client,
                "connected_at": beat.at,
                "last_heartbeat_at": beat.at,
                "fingerprint": beat.fingerprint,
                "fingerprint_since": beat.at,
            }
            for beat in newest.values()
        ],
    )


def close_session(
    session: Session, *, server: str, session_id: str, now: datetime, policy: alerts.Alerting
) -> bool:
    """Forget a closed session; alerts about it resolve."""
    row = _server(session, server)
    host = session.scalar(
        select(HostSession).where(HostSession.server_id == row.id, HostSession.session_id == session_id)
    )
    if host is None:
        return False
    _resolve_session_alerts(session, row, session_id, now, policy)
    session.delete(host)
    return True


@dataclass(frozen=True)
class Current:
    """The listing a session is compared with: its view's current one, since when, and its TTL."""

    since: datetime
    fingerprint: str
    listing_id: int
    grace: timedelta
    """The session grace, or the listing's `ttlMs` when longer: a host may lawfully keep it that long."""
    profile: str | None = None
    """The client view it is the current listing of; None: the server's own versions."""


class Currents:
    """The current listing per (server, client view), read once per pass over the sessions."""

    def __init__(self, session: Session, grace: timedelta) -> None:
        self.session = session
        self.grace = grace
        self.cache: dict[tuple[int, str | None], Current | None] = {}
        self.left: dict[tuple[int, str | None, str], datetime | None] = {}

    def of(self, server: Server, host: HostSession) -> Current | None:
        view = self._view(server, host)
        key = (server.id, view.profile if view is not None else None)
        if key not in self.cache:
            grace = max(self.grace, timedelta(milliseconds=server.ttl_ms or 0))
            if view is not None:
                fingerprint = self.session.scalar(
                    select(Listing.fingerprint).where(Listing.id == view.listing_id)
                )
                assert fingerprint is not None
                self.cache[key] = Current(view.first_seen, fingerprint, view.listing_id, grace, view.profile)
            else:
                row = _current(self.session, server.id)
                self.cache[key] = (
                    Current(row[0].first_seen, row[1], row[0].listing_id, grace) if row else None
                )
        return self.cache[key]

    def stale_since(self, server: Server, host: HostSession) -> datetime | None:
        """When the session started lagging: the later of its report and the moment the server (its
        client view) moved off the listing the session holds. Newer versions after that move nothing:
        the session has been behind since the first listing it did not get (docs/contract.md
        section 13). A listing the monitor never saw: since the session reported it."""
        current = self.of(server, host)
        if current is None or current.fingerprint == host.fingerprint:
            return None
        left = self._left_at(server.id, current.profile, host.fingerprint)
        return max(host.fingerprint_since, left) if left is not None else host.fingerprint_since

    def is_stale(self, server: Server, host: HostSession, now: datetime) -> bool:
        """Lagging for longer than the grace (stretched to the listing's `ttlMs`)."""
        since = self.stale_since(server, host)
        current = self.of(server, host)
        return since is not None and current is not None and now - since > current.grace

    def _left_at(self, server_id: int, profile: str | None, held: str) -> datetime | None:
        """When the listing after the newest span that showed `held` was first seen; None if none did."""
        key = (server_id, profile, held)
        if key not in self.left:
            spans: Any = (  # the server's versions, or one client view's spans, oldest first
                select(Snapshot.version, Snapshot.listing_id, Snapshot.first_seen).where(
                    Snapshot.server_id == server_id
                )
                if profile is None
                else select(ClientView.id, ClientView.listing_id, ClientView.first_seen).where(
                    ClientView.server_id == server_id, ClientView.profile == profile
                )
            ).subquery()
            order, listing, first_seen = spans.c
            newest_held = self.session.scalar(
                select(func.max(order))
                .join(Listing, Listing.id == listing)
                .where(Listing.fingerprint == held)
            )
            self.left[key] = (
                self.session.scalar(select(func.min(first_seen)).where(order > newest_held))
                if newest_held is not None
                else None
            )
        return self.left[key]

    def _view(self, server: Server, host: HostSession) -> ClientView | None:
        """The client view that declared what the host declared (and, among several, the one whose
        client name the host's starts with); None: compare with the server's versions."""
        if host.client_capabilities is None:
            return None
        views = current_views(self.session, server.id)
        return matching_view([(view, view.client) for view in views], host.client_capabilities, host.client)


def _current(session: Session, server_id: int) -> tuple[Snapshot, str] | None:
    row = session.execute(
        select(Snapshot, Listing.fingerprint)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version.desc())
        .limit(1)
    ).first()
    return (row[0], row[1]) if row else None


def _with_servers(session: Session) -> list[tuple[HostSession, Server]]:
    """Every host session with its server, each server read once (a server's row, JSON columns and
    all, read again for each of thousands of sessions was most of a session check's time)."""
    hosts = session.scalars(select(HostSession)).all()
    servers = {
        server.id: server
        for server in session.scalars(select(Server).where(Server.id.in_({h.server_id for h in hosts})))
    }
    return [(host, servers[host.server_id]) for host in hosts if host.server_id in servers]


def count_stale(session: Session, *, now: datetime, grace: timedelta) -> int:
    """How many sessions `list_sessions(stale_only=True)` would list (the overview's tile), by the
    same test: each session against its client view's listing, with the `ttlMs`-stretched grace."""
    rows = _with_servers(session)
    currents = Currents(session, grace)
    return sum(1 for host, server in rows if currents.is_stale(server, host, now))


def list_sessions(
    session: Session, *, stale_only: bool, now: datetime, grace: timedelta = timedelta(minutes=5)
) -> list[SessionRecord]:
    """Every reported session, stale ones first, then the oldest connection first."""
    views = []
    rows = _with_servers(session)
    currents = Currents(session, grace)
    for host, server in rows:
        current = currents.of(server, host)
        stale = currents.is_stale(server, host, now)
        if stale_only and not stale:
            continue
        views.append(
            SessionRecord(
                server=server.name,
                session_id=host.session_id,
                client=host.client,
                client_capabilities=host.client_capabilities,
                connected_at=host.connected_at,
                last_heartbeat_at=host.last_heartbeat_at,
                fingerprint=host.fingerprint,
                current_fingerprint=current.fingerprint if current else None,
                stale=stale,
                stale_since=currents.stale_since(server, host) if stale else None,
            )
        )
    views.sort(key=lambda v: (not v.stale, v.connected_at))
    return views


def _listing_tools(session: Session, listing_id: int) -> list[dict[str, Any]]:
    return list(
        session.scalars(
            select(ToolDefinition.definition)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == listing_id)
        )
    )


MISSED_CACHE_SIZE = 256
"""Listing pairs whose diff the session checker keeps: a session that holds an old listing for days
is re-checked every interval, and listings are content-addressed, so their diff never changes."""

_missed: OrderedDict[tuple[str, str], list[Finding]] = OrderedDict()
_missed_lock = threading.Lock()


def missed_changes(
    session: Session, held: str, current_listing_id: int, current: str | None = None
) -> list[Finding] | None:
    """What a session holding listing `held` misses, or None when the monitor never saw that listing.

    Diffed once per pair of listings (by fingerprint, `current` when the caller knows it) and then
    answered from a bounded cache, so a stale session costs one diff, not one per check.
    """
    key = (held, current) if current is not None else None
    if key is not None:
        with _missed_lock:
            if key in _missed:
                _missed.move_to_end(key)
                return list(_missed[key])
    old_id = session.scalar(select(Listing.id).where(Listing.fingerprint == held))
    if old_id is None:
        return None
    findings = diff_listings(
        _listing_tools(session, old_id), _listing_tools(session, current_listing_id)
    ).findings
    if key is not None:
        with _missed_lock:
            _missed[key] = findings
            while len(_missed) > MISSED_CACHE_SIZE:
                _missed.popitem(last=False)
    return list(findings)


def check_sessions(
    session: Session,
    *,
    now: datetime,
    grace: timedelta,
    max_age: timedelta,
    expiry: timedelta,
    policy: alerts.Alerting,
) -> None:
    """Expire silent sessions, and open or resolve `session-stale` and `session-long-lived` alerts.

    `session-stale` resolves only once the session has been seen current for a full check
    (`Alerting.clear_standing`), so a condition checked every few seconds is one alert, not a stream.
    """
    expired = session.execute(
        select(HostSession, Server)
        .join(Server, Server.id == HostSession.server_id)
        .where(HostSession.last_heartbeat_at < now - expiry)
    ).all()
    for host, server in expired:
        # Going silent is no sign of catching up: a stale session's alert stays open (until the host
        # reports the current listing again, or a person resolves it); being long-lived has ended.
        lifecycle.resolve_matching(
            session, server.id, "session-long-lived", session_id=host.session_id, now=now, policy=policy
        )
    if expired:
        session.execute(delete(HostSession).where(HostSession.id.in_([host.id for host, _ in expired])))
    rows = _with_servers(session)
    currents = Currents(session, grace)
    stale_alerts = lifecycle.open_keys(session, "session-stale")
    for host, server in rows:
        current = currents.of(server, host)
        missed = (
            missed_changes(session, host.fingerprint, current.listing_id, current.fingerprint)
            if current is not None and currents.is_stale(server, host, now)
            else []
        )
        if missed != []:  # a list of what it missed, or None: a listing the monitor never saw
            stale = rules.session_stale(server.name, host.session_id, host.client, missed)
            policy.raise_standing(session, server, stale, session_id=host.session_id, now=now)
        elif lifecycle.open_key(server.id, "session-stale", None, host.session_id) in stale_alerts:
            policy.clear_standing(session, server.id, "session-stale", session_id=host.session_id, now=now)
        if now - host.connected_at > max_age:
            long_lived = rules.session_long_lived(server.name, host.session_id, host.connected_at, max_age)
            policy.raise_standing(session, server, long_lived, session_id=host.session_id, now=now)


def _resolve_session_alerts(
    session: Session, server: Server, session_id: str, now: datetime, policy: alerts.Alerting
) -> None:
    for rule in ("session-stale", "session-long-lived"):
        lifecycle.resolve_matching(session, server.id, rule, session_id=session_id, now=now, policy=policy)
