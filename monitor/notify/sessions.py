"""Host sessions: what listing each long-lived host or gateway session still acts on.

Hosts cache `tools/list` at connect time. A session that still holds last week's fingerprint
keeps gating (or not gating) tools by last week's claims, so the monitor compares every
reported session with the server's current version and raises `session-stale` with the
severity of the worst change the session missed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from monitor.core.diff import diff_listings
from monitor.core.findings import Finding
from monitor.core.fingerprint import fingerprint as listing_fingerprint
from monitor.core.listing import ListingError, validate_tools
from monitor.core.rules import servers as rules
from monitor.notify import alerts
from monitor.store.models import HostSession, Listing, ListingTool, Server, Snapshot, ToolDefinition
from monitor.store.records import SessionRecord


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
        except ListingError as exc:
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
) -> HostSession:
    """Create or replace the report of one session; it must carry a fingerprint or the tools."""
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


def _current(session: Session, server_id: int) -> tuple[Snapshot, str] | None:
    row = session.execute(
        select(Snapshot, Listing.fingerprint)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version.desc())
        .limit(1)
    ).first()
    return (row[0], row[1]) if row else None


def _stale_since(host: HostSession, current: tuple[Snapshot, str] | None) -> datetime | None:
    """When the session started lagging: the later of its report and the current version's start."""
    if current is None or current[1] == host.fingerprint:
        return None
    return max(host.fingerprint_since, current[0].first_seen)


def list_sessions(
    session: Session, *, stale_only: bool, now: datetime, grace: timedelta = timedelta(minutes=5)
) -> list[SessionRecord]:
    """Every reported session, stale ones first, then the oldest connection first."""
    views = []
    rows = session.execute(select(HostSession, Server).join(Server, Server.id == HostSession.server_id)).all()
    currents: dict[int, tuple[Snapshot, str] | None] = {}
    for host, server in rows:
        if server.id not in currents:
            currents[server.id] = _current(session, server.id)
        current = currents[server.id]
        since = _stale_since(host, current)
        stale = since is not None and now - since > grace
        if stale_only and not stale:
            continue
        views.append(
            SessionRecord(
                server=server.name,
                session_id=host.session_id,
                client=host.client,
                connected_at=host.connected_at,
                last_heartbeat_at=host.last_heartbeat_at,
                fingerprint=host.fingerprint,
                current_fingerprint=current[1] if current else None,
                stale=stale,
                stale_since=since if stale else None,
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
    """Expire silent sessions, and open or resolve `session-stale` and `session-long-lived` alerts."""
    expired = session.execute(
        select(HostSession, Server)
        .join(Server, Server.id == HostSession.server_id)
        .where(HostSession.last_heartbeat_at < now - expiry)
    ).all()
    for host, server in expired:
        _resolve_session_alerts(session, server, host.session_id, now, policy)
    if expired:
        session.execute(delete(HostSession).where(HostSession.id.in_([host.id for host, _ in expired])))
    rows = session.execute(select(HostSession, Server).join(Server, Server.id == HostSession.server_id)).all()
    currents: dict[int, tuple[Snapshot, str] | None] = {}
    for host, server in rows:
        if server.id not in currents:
            currents[server.id] = _current(session, server.id)
        current = currents[server.id]
        since = _stale_since(host, current)
        lagging = since is not None and current is not None and now - since > grace
        missed = (
            missed_changes(session, host.fingerprint, current[0].listing_id, current[1])
            if lagging and current
            else []
        )
        if missed != []:  # a list of what it missed, or None: a listing the monitor never saw
            stale = rules.session_stale(server.name, host.session_id, host.client, missed)
            policy.raise_standing(session, server, stale, session_id=host.session_id, now=now)
        else:
            alerts.resolve_matching(
                session, server.id, "session-stale", session_id=host.session_id, now=now, policy=policy
            )
        if now - host.connected_at > max_age:
            long_lived = rules.session_long_lived(server.name, host.session_id, host.connected_at, max_age)
            policy.raise_standing(session, server, long_lived, session_id=host.session_id, now=now)


def _resolve_session_alerts(
    session: Session, server: Server, session_id: str, now: datetime, policy: alerts.Alerting
) -> None:
    for rule in ("session-stale", "session-long-lived"):
        alerts.resolve_matching(session, server.id, rule, session_id=session_id, now=now, policy=policy)
