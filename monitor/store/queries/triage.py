"""What the dashboard needs in the middle of an incident: the diff behind each alert, fleet-wide
alert counts, the version a host session holds, and a tool found by name across every server."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from monitor.core.states import AlertState
from monitor.store.models import (
    Alert,
    AlertFinding,
    FindingRecord,
    HostSession,
    Listing,
    ListingTool,
    Server,
    Snapshot,
    ToolDefinition,
)
from monitor.store.queries.history import current_snapshots, tool_history
from monitor.store.records import SnapshotRecord, ToolVersionRecord

SessionKey = tuple[str, str]
"""A host session by (server name, session id)."""
_FROM = aliased(Snapshot)
_TO = aliased(Snapshot)


def alert_diffs(session: Session, alert_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """For each alert caused by a listing change: the versions of the newest finding it gathered
    (from, to), i.e. the diff that caused it. Server and session alerts have none."""
    if not alert_ids:
        return {}
    newest = (
        select(AlertFinding.alert_id, func.max(AlertFinding.finding_id).label("finding_id"))
        .join(FindingRecord, FindingRecord.id == AlertFinding.finding_id)
        .where(AlertFinding.alert_id.in_(list(alert_ids)), FindingRecord.to_snapshot_id.is_not(None))
        .group_by(AlertFinding.alert_id)
        .subquery()
    )
    rows = session.execute(
        select(newest.c.alert_id, _FROM.version, _TO.version)
        .join(FindingRecord, FindingRecord.id == newest.c.finding_id)
        .join(_FROM, _FROM.id == FindingRecord.from_snapshot_id)
        .join(_TO, _TO.id == FindingRecord.to_snapshot_id)
    ).all()
    return {int(alert_id): (int(old), int(new)) for alert_id, old, new in rows}


def finding_alerts(session: Session, finding_ids: Sequence[int]) -> dict[int, int]:
    """The alert each of these findings opened or joined, by finding id (a finding below the alert
    threshold, or muted by a silence, has none)."""
    if not finding_ids:
        return {}
    rows = session.execute(
        select(AlertFinding.finding_id, AlertFinding.alert_id).where(
            AlertFinding.finding_id.in_(list(finding_ids))
        )
    ).all()
    return {int(finding): int(alert) for finding, alert in rows}


def diff_alert_ids(session: Session, server_id: int, old_version: int, new_version: int) -> list[int]:
    """The alerts that findings between two versions of a server raised or joined, worst first,
    then newest (the diff page links back to them); at most 20."""
    low, high = sorted((old_version, new_version))
    rows = session.execute(
        select(Alert.id, Alert.severity_rank)
        .distinct()
        .join(AlertFinding, AlertFinding.alert_id == Alert.id)
        .join(FindingRecord, FindingRecord.id == AlertFinding.finding_id)
        .join(_TO, _TO.id == FindingRecord.to_snapshot_id)
        .where(Alert.server_id == server_id, _TO.version > low, _TO.version <= high)
        .order_by(Alert.severity_rank.desc(), Alert.id.desc())
        .limit(20)
    ).all()
    return [int(alert_id) for alert_id, _ in rows]


def fleet_alert_counts(session: Session) -> dict[AlertState, dict[str, int]]:
    """Unresolved alerts of the whole fleet by state and severity (for the overview's tiles)."""
    counts: dict[AlertState, dict[str, int]] = {state: {} for state in AlertState.unresolved()}
    rows = session.execute(
        select(Alert.state, Alert.severity, func.count())
        .where(Alert.state.in_([s.value for s in AlertState.unresolved()]))
        .group_by(Alert.state, Alert.severity)
    )
    for state, severity, count in rows:
        counts[AlertState(state)][severity] = int(count)
    return counts


def alert_rules(session: Session) -> list[str]:
    """The rules any stored alert has, for the alerts page's filter."""
    return list(session.scalars(select(Alert.rule).distinct().order_by(Alert.rule)))


def session_alerts(session: Session) -> dict[SessionKey, list[tuple[int, str, str]]]:
    """Unresolved alerts about host sessions: (server, session id) -> [(alert id, rule, severity)]."""
    rows = session.execute(
        select(Server.name, Alert.session_id, Alert.id, Alert.rule, Alert.severity)
        .join(Server, Server.id == Alert.server_id)
        .where(Alert.session_id.is_not(None), Alert.state.in_([s.value for s in AlertState.unresolved()]))
        .order_by(Alert.severity_rank.desc(), Alert.id.desc())
    )
    found: dict[SessionKey, list[tuple[int, str, str]]] = defaultdict(list)
    for server, session_id, alert_id, rule, severity in rows:
        found[server, str(session_id)].append((int(alert_id), rule, severity))
    return found


def current_by_name(session: Session) -> dict[str, SnapshotRecord]:
    """Every server's newest version, by server name (two light statements)."""
    names = dict(session.execute(select(Server.id, Server.name)).all())
    return {names[server_id]: snapshot for server_id, snapshot in current_snapshots(session).items()}


def versions_of(session: Session, held: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """For (server name, listing fingerprint) pairs: the newest version of that server with that
    listing, in one statement; a pair left out is a listing never seen on that server."""
    wanted = set(held)
    if not wanted:
        return {}
    rows = session.execute(
        select(Server.name, Listing.fingerprint, func.max(Snapshot.version))
        .join(Snapshot, Snapshot.listing_id == Listing.id)
        .join(Server, Server.id == Snapshot.server_id)
        .where(Listing.fingerprint.in_({fingerprint for _, fingerprint in wanted}))
        .group_by(Server.name, Listing.fingerprint)
    ).all()
    return {(name, fp): int(version) for name, fp, version in rows if (name, fp) in wanted}


def session_diffs(session: Session, keys: Iterable[SessionKey]) -> dict[SessionKey, tuple[int, int]]:
    """For host sessions (server, session id) still open: the version each holds and the server's
    current one, when they differ and the held listing is a version of that server."""
    wanted = set(keys)
    if not wanted:
        return {}
    rows = session.execute(
        select(Server.name, Server.id, HostSession.session_id, HostSession.fingerprint)
        .join(Server, Server.id == HostSession.server_id)
        .where(HostSession.session_id.in_({session_id for _, session_id in wanted}))
    ).all()
    rows = [row for row in rows if (row[0], row[2]) in wanted]
    currents = current_snapshots(session, {row[1] for row in rows})
    held = versions_of(session, [(row[0], row[3]) for row in rows])
    diffs = {}
    for name, server_id, session_id, fingerprint in rows:
        version, current = held.get((name, fingerprint)), currents.get(server_id)
        if version is not None and current is not None and version != current.version:
            diffs[name, session_id] = (version, current.version)
    return diffs


@dataclass(frozen=True)
class ToolMatch:
    server: str
    server_id: int
    tool: str
    listed_now: bool
    """Whether the server's newest version lists the tool."""


def find_tools(session: Session, text: str, *, limit: int) -> list[ToolMatch]:
    """Tools whose name contains `text` (any case) in any version of any server: exact names first,
    then by server and name. `%` and `_` are matched literally.

    Two steps: the distinct matching names (one pass over the definitions), then the servers that
    ever listed one of them, through the name index; a join ordered by server name would visit
    every version of every server first."""
    needle = text.lower()
    names = list(
        session.scalars(
            select(ToolDefinition.name)
            .distinct()
            .where(func.lower(ToolDefinition.name).contains(needle, autoescape=True))
        )
    )
    if not names:
        return []
    names.sort(key=lambda name: (name.lower() != needle, name))
    names = names[: limit * 4]
    pairs = session.execute(
        select(Snapshot.server_id, ToolDefinition.name)
        .select_from(ToolDefinition)
        .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
        .join(Snapshot, Snapshot.listing_id == ListingTool.listing_id)
        .where(ToolDefinition.name.in_(names))
        .distinct()
    ).all()
    server_names = dict(
        session.execute(select(Server.id, Server.name).where(Server.id.in_({sid for sid, _ in pairs}))).all()
    )
    found = sorted(
        ((server_names[sid], int(sid), name) for sid, name in pairs),
        key=lambda row: (row[2].lower() != needle, row[0], row[2]),
    )[:limit]
    if not found:
        return []
    newest = (
        select(Snapshot.server_id, func.max(Snapshot.version).label("version"))
        .where(Snapshot.server_id.in_({row[1] for row in found}))
        .group_by(Snapshot.server_id)
        .subquery()
    )
    current = set(
        session.execute(
            select(Snapshot.server_id, ToolDefinition.name)
            .join(newest, (newest.c.server_id == Snapshot.server_id) & (newest.c.version == Snapshot.version))
            .join(ListingTool, ListingTool.listing_id == Snapshot.listing_id)
            .join(ToolDefinition, ToolDefinition.id == ListingTool.tool_id)
            .where(ToolDefinition.name.in_({row[2] for row in found}))
        ).all()
    )
    return [ToolMatch(name, sid, tool, (sid, tool) in current) for name, sid, tool in found]


@dataclass(frozen=True)
class ToolAround:
    """One tool's definition in force at a server version, with the definitions before and after."""

    current: ToolVersionRecord
    previous: ToolVersionRecord | None
    following: ToolVersionRecord | None


def tool_around(session: Session, server_id: int, tool: str, version: int) -> ToolAround | None:
    """The run of versions holding the tool's definition at `version` (absent runs included), and
    its neighbours; None when the tool had not appeared by then."""
    runs = tool_history(session, server_id, tool)
    for index, run in enumerate(runs):
        if run.from_version <= version <= run.to_version:
            return ToolAround(
                run,
                runs[index - 1] if index > 0 else None,
                runs[index + 1] if index + 1 < len(runs) else None,
            )
    return None


def tool_version_at(session: Session, server_id: int, tool: str, version: int) -> ToolVersionRecord | None:
    """The tool's definition in force at `version` and since when; None if it was not listed then."""
    around = tool_around(session, server_id, tool, version)
    return around.current if around is not None and around.current.present else None
