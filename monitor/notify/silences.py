"""Silences, as people know them from Alertmanager: mute findings by server, tool and/or rule until a time.

A silence says who and why. While it is active, matching findings are still stored (marked with the
silence, and shown as muted) but open no alert and send no webhook. A silence that ends, or is
expired early, resolves nothing by itself: an alert that was open stays open, and a condition that
persists raises its alert at its next finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from monitor.core.rules import CATALOG
from monitor.core.states import AlertState
from monitor.core.text import make_visible
from monitor.core.times import utc_text
from monitor.store.models import Server, Silence
from monitor.store.records import AlertRecord, SilenceRecord


class SilenceError(ValueError):
    """A silence the monitor cannot keep; the message says why (a 422, or a CLI error)."""


class UnknownServer(SilenceError):
    """It names a server that is not registered (the API's 404)."""


class EndsTooSoon(SilenceError):
    """It would end before it starts (the API's 409)."""


@dataclass(frozen=True)
class Muting:
    """The silences active for one server at one instant."""

    silences: Sequence[Silence]

    def match(self, tool: str | None, rule: str) -> Silence | None:
        """The silence (the one that lasts longest) matching this finding, if any."""
        matching = [
            s
            for s in self.silences
            if (s.tool is None or s.tool == tool) and (s.rule is None or s.rule == rule)
        ]
        return max(matching, key=lambda s: (s.ends_at, s.id), default=None)


def muting(session: Session, server: str, now: datetime) -> Muting:
    rows = session.scalars(
        select(Silence).where(
            Silence.ends_at > now,
            Silence.created_at <= now,
            or_(Silence.server.is_(None), Silence.server == server),
        )
    ).all()
    return Muting(rows)


def create_silence(
    session: Session,
    *,
    server: str | None,
    tool: str | None,
    rule: str | None,
    ends_at: datetime,
    created_by: str,
    reason: str,
    now: datetime,
) -> SilenceRecord:
    """Check and store a silence. It must match something narrower than everything, end in the future,
    name a known rule and a registered server, and say who and why."""
    if server is None and tool is None and rule is None:
        raise SilenceError("a silence needs at least one of server, tool or rule: it would mute everything")
    if ends_at <= now:
        raise EndsTooSoon(f"ends_at {utc_text(ends_at)} is not in the future")
    if rule is not None and rule not in CATALOG:
        raise SilenceError(f"unknown rule {make_visible(rule)!r} (see `drift-monitor rules`)")
    if server is not None and session.scalar(select(Server.id).where(Server.name == server)) is None:
        raise UnknownServer(f"no server named {make_visible(server)!r}")
    if not created_by.strip() or not reason.strip():
        raise SilenceError("a silence needs who made it (created_by) and why (reason)")
    silence = Silence(
        server=server,
        tool=tool,
        rule=rule,
        ends_at=ends_at,
        created_by=created_by.strip(),
        reason=reason.strip(),
        created_at=now,
    )
    session.add(silence)
    session.flush()
    return SilenceRecord.of(silence, now)


def list_silences(
    session: Session, *, now: datetime, active_only: bool, limit: int = 500
) -> list[SilenceRecord]:
    """Active silences first (the soonest to end first), then ended ones, newest first."""
    query = select(Silence)
    if active_only:
        query = query.where(Silence.ends_at > now)
    rows = session.scalars(query.order_by(Silence.ends_at.desc()).limit(limit)).all()
    records = [SilenceRecord.of(row, now) for row in rows]
    return sorted(records, key=lambda r: (not r.active, r.ends_at if r.active else -r.ends_at.timestamp()))


def expire_silence(session: Session, silence_id: int, now: datetime) -> SilenceRecord | None:
    """End a silence now (the findings it muted stay muted). None: no such silence."""
    silence = session.get(Silence, silence_id, with_for_update=True)
    if silence is None:
        return None
    silence.ends_at = min(silence.ends_at, now)
    return SilenceRecord.of(silence, now)


def mark_silenced(session: Session, alerts: Sequence[AlertRecord], now: datetime) -> list[AlertRecord]:
    """The alerts, each unresolved one that an active silence matches marked with until when and by
    whom: a silenced open alert must not look like any other, wherever it is listed."""
    unresolved = [alert for alert in alerts if alert.state != AlertState.RESOLVED]
    if not unresolved:
        return list(alerts)
    active = session.scalars(select(Silence).where(Silence.ends_at > now, Silence.created_at <= now)).all()
    marked = []
    for alert in alerts:
        silence = None
        if alert.state != AlertState.RESOLVED:
            silence = Muting([s for s in active if s.server in (None, alert.server)]).match(
                alert.tool, alert.rule
            )
        marked.append(
            alert
            if silence is None
            else alert.model_copy(
                update={"silenced_until": silence.ends_at, "silenced_by": silence.created_by}
            )
        )
    return marked
