"""A server's history: its versions, the one in force at an instant, a listing, diffs and tool histories.

Findings of consecutive versions are read as stored; a diff between two arbitrary versions runs the
one diff engine (`monitor.core.diff.diff_listings`) over the stored tools. Nothing here writes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from sqlalchemy import and_, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from monitor.core.diff import diff_listings
from monitor.store.models import FindingRecord, Listing, ListingTool, Server, Snapshot, ToolDefinition
from monitor.store.queries.changes import change_query
from monitor.store.records import (
    ChangeRecord,
    FindingFields,
    SnapshotListing,
    SnapshotRecord,
    ToolVersionRecord,
)

_SNAPSHOT_COLUMNS = (
    Snapshot.id,
    Snapshot.server_id,
    Snapshot.listing_id,
    Snapshot.version,
    Listing.fingerprint,
    Listing.tool_count,
    Snapshot.first_seen,
    Snapshot.last_seen,
    Snapshot.poll_count,
    Snapshot.protocol_version,
)
"""The columns of a SnapshotRecord (joined with its Listing)."""


# --- versions ------------------------------------------------------------------------------


def current_snapshots(session: Session, server_ids: Iterable[int] | None = None) -> dict[int, SnapshotRecord]:
    """The newest version of each server, read through the (server_id, version) unique index."""
    latest = select(Snapshot.server_id, func.max(Snapshot.version).label("version"))
    if server_ids is not None:
        latest = latest.where(Snapshot.server_id.in_(list(server_ids)))
    newest = latest.group_by(Snapshot.server_id).subquery()
    rows = session.execute(
        select(*_SNAPSHOT_COLUMNS)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .join(
            newest,
            and_(Snapshot.server_id == newest.c.server_id, Snapshot.version == newest.c.version),
        )
    ).all()
    return {row.server_id: SnapshotRecord.model_validate(row) for row in rows}


def list_snapshots(
    session: Session, server_id: int, *, limit: int, before: int | None = None
) -> list[SnapshotRecord]:
    """Versions newest first; `before` is a version number (exclusive)."""
    query = (
        select(*_SNAPSHOT_COLUMNS)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version.desc())
        .limit(limit)
    )
    if before is not None:
        query = query.where(Snapshot.version < before)
    return [SnapshotRecord.model_validate(row) for row in session.execute(query)]


def find_snapshot(session: Session, server_id: int, version: int) -> SnapshotRecord | None:
    row = session.execute(
        select(*_SNAPSHOT_COLUMNS)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id, Snapshot.version == version)
    ).first()
    return SnapshotRecord.model_validate(row) if row else None


def snapshot_listing(session: Session, server_id: int, version: int) -> SnapshotListing | None:
    """One version with its whole listing."""
    row = session.execute(
        select(*_SNAPSHOT_COLUMNS, Snapshot.server_info, Server.name.label("server"))
        .join(Listing, Listing.id == Snapshot.listing_id)
        .join(Server, Server.id == Snapshot.server_id)
        .where(Snapshot.server_id == server_id, Snapshot.version == version)
    ).first()
    if row is None:
        return None
    tools = listing_tools(session, row.listing_id, row.id)
    return SnapshotListing.model_validate({**row._mapping, "tools": tools})


def version_summaries(session: Session, snapshot_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """For each snapshot: how many findings led to it and the worst one's rank."""
    if not snapshot_ids:
        return {}
    rows = session.execute(
        select(FindingRecord.to_snapshot_id, func.count(), func.max(FindingRecord.severity_rank))
        .where(FindingRecord.to_snapshot_id.in_(list(snapshot_ids)))
        .group_by(FindingRecord.to_snapshot_id)
    ).all()
    return {int(sid): (int(count), int(worst)) for sid, count, worst in rows if sid is not None}


@dataclass(frozen=True)
class InForce:
    """The answer to "what listing did this server serve at T": the version and its neighbourhood."""

    snapshot: SnapshotRecord
    superseded_at: datetime | None
    """When the next version was first seen; None while this one is the newest."""


def snapshot_at(session: Session, name: str, at: datetime) -> InForce | None:
    """One statement on the (server_id, first_seen) index: the newest span starting at or before `at`."""
    following = aliased(Snapshot)
    next_start = (
        select(following.first_seen)
        .where(following.server_id == Snapshot.server_id, following.version == Snapshot.version + 1)
        .scalar_subquery()
    )
    row = session.execute(
        select(*_SNAPSHOT_COLUMNS, next_start.label("superseded_at"))
        .join(Listing, Listing.id == Snapshot.listing_id)
        .join(Server, Server.id == Snapshot.server_id)
        .where(Server.name == name, Snapshot.first_seen <= at)
        .order_by(Snapshot.first_seen.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return InForce(SnapshotRecord.model_validate(row), row.superseded_at)


def first_snapshot_time(session: Session, server_id: int) -> datetime | None:
    return session.scalar(select(func.min(Snapshot.first_seen)).where(Snapshot.server_id == server_id))


def listing_tools(session: Session, listing_id: int, snapshot_id: int) -> list[dict[str, Any]]:
    """The listing's tools as the server sent them, in the order first received: with the `_meta` the
    version `snapshot_id` keeps (its own server's, as last sent)."""
    metas = session.scalar(select(Snapshot.metas).where(Snapshot.id == snapshot_id))
    kept = metas if isinstance(metas, dict) else {}
    definitions = session.scalars(
        select(ToolDefinition.definition)
        .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
        .where(ListingTool.listing_id == listing_id)
        .order_by(ListingTool.position)
    ).all()
    return [
        definition
        if definition.get("name") not in kept
        else {**definition, "_meta": kept[definition["name"]]}
        for definition in definitions
    ]


def listing_fingerprints(session: Session, listing_id: int) -> dict[str, str]:
    """Tool name -> the stored content address of its definition, for links to the raw JSON (hashing
    a hostile 3 MB definition again per page view cost half a second)."""
    return dict(
        session.execute(
            select(ToolDefinition.name, ToolDefinition.fingerprint)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == listing_id)
        ).all()
    )


# --- diffs ---------------------------------------------------------------------------------


@dataclass
class ToolChangeView:
    """One tool that differs between two versions: both definitions and the findings about it."""

    name: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    findings: list[FindingFields] = field(default_factory=list)
    old_fingerprint: str | None = None
    """The stored content addresses of the two definitions, so a page links to their raw JSON without
    hashing megabytes per view."""
    new_fingerprint: str | None = None

    @property
    def worst(self) -> str | None:
        worst = max(self.findings, key=lambda f: f.rank, default=None)
        return worst.severity.value if worst else None


@dataclass(frozen=True)
class DiffView:
    old: SnapshotRecord
    new: SnapshotRecord
    tools: list[ToolChangeView]
    stored: bool
    """True when the findings are the ones recorded when the change was detected (adjacent versions)."""
    findings: list[FindingFields] = field(default_factory=list)
    """Every finding between the two, worst first: the tools' and the server's own (no tool)."""
    instructions: tuple[str | None, str | None] | None = None
    """The server's instructions in the old and the new version, when they differ."""


def server_definition(session: Session, server_id: int, fingerprint: str) -> dict[str, Any] | None:
    """The tool definition with this content address, if a version of this server listed it."""
    return session.scalar(
        select(ToolDefinition.definition)
        .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
        .join(Snapshot, Snapshot.listing_id == ListingTool.listing_id)
        .where(Snapshot.server_id == server_id, ToolDefinition.fingerprint == fingerprint)
        .limit(1)
    )


def _members(session: Session, listing_id: int) -> dict[str, int]:
    """Tool name -> tool definition id of one listing: enough to see which tools changed."""
    return dict(
        session.execute(
            select(ToolDefinition.name, ToolDefinition.id)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == listing_id)
        ).all()
    )


T = TypeVar("T")


def _definitions(session: Session, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    return _by_id(session, ToolDefinition.definition, ids)


def _fingerprints(session: Session, ids: Iterable[int]) -> dict[int, str]:
    return _by_id(session, ToolDefinition.fingerprint, ids)


def _by_id(session: Session, column: InstrumentedAttribute[T], ids: Iterable[int]) -> dict[int, T]:
    """`column` of each tool definition in `ids`, read 500 ids a statement (bound-parameter limits)."""
    wanted = sorted(set(ids))
    found: dict[int, T] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        found.update(
            session.execute(select(ToolDefinition.id, column).where(ToolDefinition.id.in_(chunk))).all()
        )
    return found


FAR_DIFFS_KEPT = 16
"""Findings of version pairs no poll compared (not adjacent) kept per process, by the two listings'
content addresses: such a pair's page diffs its tools on its first view, not on every view (a
hostile schema of 100,000 properties takes seconds to diff)."""
_far_diffs: OrderedDict[tuple[str, str], list[FindingFields]] = OrderedDict()
_far_diffs_lock = threading.Lock()


def _far_findings(old: str, new: str, tools: Sequence[ToolChangeView]) -> list[FindingFields]:
    with _far_diffs_lock:
        if (old, new) in _far_diffs:
            _far_diffs.move_to_end((old, new))
            return list(_far_diffs[old, new])
    findings = [
        FindingFields.model_validate(f)
        for f in diff_listings(
            [t.old for t in tools if t.old is not None], [t.new for t in tools if t.new is not None]
        ).findings
    ]
    with _far_diffs_lock:
        _far_diffs[old, new] = findings
        while len(_far_diffs) > FAR_DIFFS_KEPT:
            _far_diffs.popitem(last=False)
    return list(findings)


def diff_versions(session: Session, server_id: int, old_version: int, new_version: int) -> DiffView | None:
    """The changed tools between two versions of one server, with findings about each.

    Only tools whose stored definition differs are loaded. Consecutive versions show the findings
    stored when the change was detected; other pairs run the diff engine over the changed tools
    (a tool identical on both sides can yield no finding, so leaving it out changes nothing), once
    per pair of listings while it stays among the `FAR_DIFFS_KEPT` newest compared.
    """
    old = find_snapshot(session, server_id, old_version)
    new = find_snapshot(session, server_id, new_version)
    if old is None or new is None:
        return None
    old_members = _members(session, old.listing_id)
    new_members = _members(session, new.listing_id)
    changed = sorted(
        name
        for name in old_members.keys() | new_members.keys()
        if old_members.get(name) != new_members.get(name)
    )
    definitions = _definitions(
        session,
        [old_members[n] for n in changed if n in old_members]
        + [new_members[n] for n in changed if n in new_members],
    )
    fingerprints = _fingerprints(session, definitions)
    tools = {
        name: ToolChangeView(
            name,
            definitions.get(old_members[name]) if name in old_members else None,
            definitions.get(new_members[name]) if name in new_members else None,
            old_fingerprint=fingerprints.get(old_members[name]) if name in old_members else None,
            new_fingerprint=fingerprints.get(new_members[name]) if name in new_members else None,
        )
        for name in changed
    }
    stored = new.version == old.version + 1
    findings: list[FindingFields]
    if stored:
        records = session.scalars(
            select(FindingRecord)
            .where(FindingRecord.from_snapshot_id == old.id, FindingRecord.to_snapshot_id == new.id)
            .order_by(FindingRecord.severity_rank.desc(), FindingRecord.id)
        )
        findings = [FindingFields.model_validate(r) for r in records]
    elif old.id == new.id:
        findings = []
    else:
        findings = _far_findings(old.fingerprint, new.fingerprint, list(tools.values()))
    for finding in findings:
        if finding.tool is not None:
            tools.setdefault(finding.tool, ToolChangeView(finding.tool, None, None)).findings.append(finding)
    ordered = sorted(tools.values(), key=lambda t: (-max((f.rank for f in t.findings), default=-1), t.name))
    both = select(Snapshot.id, Snapshot.instructions).where(Snapshot.id.in_([old.id, new.id]))
    told: dict[int, str | None] = dict(session.execute(both).tuples().all())
    instructions = (told.get(old.id), told.get(new.id))
    changed_instructions = instructions if instructions[0] != instructions[1] else None
    return DiffView(old, new, ordered, stored, sorted(findings, key=lambda f: -f.rank), changed_instructions)


# --- one tool's history --------------------------------------------------------------------


def tool_history(session: Session, server_id: int, tool: str) -> list[ToolVersionRecord]:
    """Every definition one tool had, oldest first, with the findings recorded at each step.

    Consecutive server versions holding the same definition form one tool version; versions in
    which the tool was absent form a run without a definition (removed, perhaps added back later).
    """
    spans = session.execute(
        select(Snapshot.id, Snapshot.version, Snapshot.listing_id, Snapshot.first_seen, Snapshot.last_seen)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version)
    ).all()
    if not spans:
        return []
    # From the server's own versions to their members: the name alone (shared by every server's
    # tool of that name) would read every server's definitions first.
    holding = dict(
        session.execute(
            select(ListingTool.listing_id, ToolDefinition.id)
            .join(Snapshot, Snapshot.listing_id == ListingTool.listing_id)
            .join(ToolDefinition, ToolDefinition.id == ListingTool.tool_id)
            .where(Snapshot.server_id == server_id, ToolDefinition.name == tool)
        ).all()
    )
    if not holding:
        return []
    fingerprints = dict(
        session.execute(
            select(ToolDefinition.id, ToolDefinition.fingerprint).where(
                ToolDefinition.id.in_(set(holding.values()))
            )
        ).all()
    )
    bodies = _definitions(session, holding.values())
    runs: list[dict[str, Any]] = []  # each run's fields, filled in as the versions go by
    run_starts: dict[int, dict[str, Any]] = {}
    current_tool_id: int | Literal["unset"] | None = "unset"
    for snapshot_id, version, listing_id, first_seen, last_seen in spans:
        tool_id = holding.get(listing_id)
        if current_tool_id == "unset" and tool_id is None:
            continue  # before the tool first appeared
        if runs and tool_id == current_tool_id:
            runs[-1].update(to_version=version, last_seen=last_seen)
            continue
        current_tool_id = tool_id
        run = {
            "from_version": version,
            "to_version": version,
            "first_seen": first_seen,
            "last_seen": last_seen,
            "fingerprint": fingerprints.get(tool_id) if tool_id is not None else None,
            "definition": bodies.get(tool_id) if tool_id is not None else None,
            "findings": [],
        }
        runs.append(run)
        run_starts[snapshot_id] = run
    for change, snapshot_id in _tool_findings(session, server_id, tool):
        if snapshot_id in run_starts:
            run_starts[snapshot_id]["findings"].append(change)
    return [ToolVersionRecord.model_validate(run) for run in runs]


def _tool_findings(session: Session, server_id: int, tool: str) -> list[tuple[ChangeRecord, int]]:
    """Findings about one tool, with the snapshot each was detected at (oldest first)."""
    query = (
        change_query()
        .add_columns(FindingRecord.to_snapshot_id)
        .where(FindingRecord.server_id == server_id, FindingRecord.tool == tool)
        .where(FindingRecord.to_snapshot_id.is_not(None))
        .order_by(FindingRecord.severity_rank.desc(), FindingRecord.id)
    )
    return [(ChangeRecord.model_validate(row), row.to_snapshot_id) for row in session.execute(query)]
