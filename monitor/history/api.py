"""A server's history over the API: its versions, one version's listing, the diff between two of them,
the version in force at an instant, and one tool's definitions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, Field

from monitor.core.ijson import unicode_text
from monitor.core.rules import Severity
from monitor.core.text import make_visible, word_diff
from monitor.identity.callers import may_read
from monitor.store import queries
from monitor.store.queries import ToolChangeView
from monitor.store.records import (
    FindingFields,
    ServerRecord,
    SnapshotListing,
    SnapshotRecord,
    ToolVersionRecord,
)
from monitor.web.deps import ReadSession, ServerName, server_or_404
from monitor.web.schemas import (
    ERRORS,
    INT32_MAX,
    ApiJSONResponse,
    IntCursor,
    Limit,
    Page,
    ToolName,
    UtcDatetime,
    not_found,
    utc,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["snapshots"],
    dependencies=[Depends(may_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
TheServer = Annotated[ServerRecord, Depends(server_or_404)]


class AtOut(BaseModel):
    server: str
    time: datetime = Field(description="The instant asked about, in UTC")
    snapshot: SnapshotRecord
    in_force_since: datetime = Field(description="When this version was first seen")
    last_confirmed: datetime = Field(description="The last poll that saw this version")
    superseded_at: datetime | None = Field(description="When the next version was first seen; null if none")
    certain: bool = Field(
        description="True when a poll at or after `time` still saw this version; false when `time` is "
        "after its last poll, so another listing may already have been served"
    )
    tools: list[dict[str, Any]] = Field(
        description="The tools of that version as the server sent them; with `tool`, only that tool "
        "(a 404 when that version did not list it, naming the versions that did)"
    )
    tool_version: ToolVersionRecord | None = Field(
        default=None,
        description="With `tool`: the tool's definition in force, since when (`first_seen`, "
        "`from_version`) and until which version it stayed the same; null without `tool`",
    )


class DiffTool(BaseModel):
    """One tool that differs between the two versions, as a row of the dashboard's diff page."""

    name: str
    status: Literal["added", "removed", "changed"]
    worst: Severity | None = Field(description="The worst finding's severity; null when none")
    old_fingerprint: str | None = Field(description="The old definition's content address; null if added")
    new_fingerprint: str | None = Field(description="The new definition's content address; null if removed")
    findings: list[FindingFields]

    @classmethod
    def of(cls, change: ToolChangeView) -> DiffTool:
        status: Literal["added", "removed", "changed"] = (
            "added" if change.old is None else "removed" if change.new is None else "changed"
        )
        return cls(
            name=change.name,
            status=status,
            worst=Severity(change.worst) if change.worst else None,
            old_fingerprint=change.old_fingerprint,
            new_fingerprint=change.new_fingerprint,
            findings=change.findings,
        )


class InstructionsDiff(BaseModel):
    """The server's instructions (what hosts put in the model's context) in both versions."""

    old: str | None
    new: str | None
    word_diff: list[tuple[Literal["=", "-", "+"], str]] = Field(
        description="The change as runs of kept (`=`), removed (`-`) and added (`+`) text"
    )


class DiffOut(BaseModel):
    server: str
    old: SnapshotRecord = Field(description="The version compared from (`from`)")
    new: SnapshotRecord = Field(description="The version compared to (`to`)")
    stored: bool = Field(
        description="True for adjacent versions: the findings recorded when the change was detected; "
        "false: the diff engine's findings over the two listings, computed now"
    )
    findings: list[FindingFields] = Field(description="Every finding, worst first (the server's own too)")
    tools: list[DiffTool] = Field(description="The tools that differ, worst first, then by name")
    instructions: InstructionsDiff | None = Field(
        default=None, description="The server's instructions, when the two versions' differ"
    )


VersionParam = Annotated[int | None, Query(ge=1, le=INT32_MAX)]


class ToolHistory(Page[ToolVersionRecord, int]):
    """Each definition of one tool, newest first; `next_before` is a `from_version`."""

    server: str
    tool: str


@router.get(
    "/servers/{name}/snapshots",
    summary="Versions of the server's listing, newest first",
    responses=not_found("server"),
)
def list_snapshots(
    server: TheServer, session: ReadSession, limit: Limit = 100, before: IntCursor = None
) -> Page[SnapshotRecord, int]:
    rows = queries.list_snapshots(session, server.id, limit=limit + 1, before=before)
    return Page.of(rows, limit, lambda snapshot: snapshot.version)


@router.get(
    "/servers/{name}/snapshots/{version}",
    summary="One version with its full listing",
    responses=not_found("server or version"),
)
def get_snapshot(
    server: TheServer, session: ReadSession, version: Annotated[int, Path(ge=1, le=INT32_MAX)]
) -> SnapshotListing:
    found = queries.snapshot_listing(session, server.id, version)
    if found is None:
        raise HTTPException(404, f"server {server.name!r} has no version {version}")
    return found


@router.get(
    "/servers/{name}/diff",
    summary="What changed between two versions (the dashboard's diff page)",
    responses=not_found("server or version"),
)
def diff(
    server: TheServer,
    session: ReadSession,
    old: Annotated[VersionParam, Query(alias="from", description="Default: the version before `to`")] = None,
    new: Annotated[VersionParam, Query(alias="to", description="Default: the newest version")] = None,
) -> DiffOut:
    """Any two versions, in either order; adjacent ones answer with the findings stored when seen."""
    if server.current is None:
        raise HTTPException(404, f"server {server.name!r} has no version yet")
    to_version = new or server.current.version
    from_version = old or max(1, to_version - 1)
    found = queries.diff_versions(session, server.id, from_version, to_version)
    if found is None:
        missing = (
            to_version if queries.find_snapshot(session, server.id, to_version) is None else from_version
        )
        raise HTTPException(
            404, f"server {server.name!r} has no version {missing} (its newest is {server.current.version})"
        )
    return DiffOut(
        server=server.name,
        old=found.old,
        new=found.new,
        stored=found.stored,
        findings=found.findings,
        tools=[DiffTool.of(change) for change in found.tools],
        instructions=_instructions(found.instructions),
    )


def _instructions(pair: tuple[str | None, str | None] | None) -> InstructionsDiff | None:
    if pair is None:
        return None
    old, new = pair
    return InstructionsDiff(old=old, new=new, word_diff=word_diff(old or "", new or ""))


@router.get(
    "/servers/{name}/at",
    summary="The version in force at an instant (incident review)",
    responses=not_found("server, or no version at or before that time"),
)
def snapshot_at(
    session: ReadSession,
    name: ServerName,
    time: Annotated[
        UtcDatetime, Query(description="ISO 8601, e.g. 2026-03-01T12:00:00Z; no offset means UTC")
    ],
    tool: ToolName = None,
) -> AtOut:
    """The version in force and its tools; with `tool`, that tool's definition and since when."""
    at = utc(time, ["query", "time"])
    found = queries.snapshot_at(session, name, at)
    if found is None:
        server_id = queries.server_id(session, name)
        if server_id is None:
            raise HTTPException(404, f"no server named {name!r}")
        first = queries.first_snapshot_time(session, server_id)
        since = f"; its first version was seen at {first.isoformat()}" if first else "; it has no version yet"
        raise HTTPException(404, f"server {name!r} had no listing at {at.isoformat()}{since}")
    snapshot = found.snapshot
    tools = queries.listing_tools(session, snapshot.listing_id, snapshot.id)
    tool_version = None
    if tool is not None:
        tools = [t for t in tools if t.get("name") == tool]
        if not tools:
            raise HTTPException(404, _not_listed_at(session, name, snapshot, tool, at))
        tool_version = queries.tool_version_at(session, snapshot.server_id, tool, snapshot.version)
    return AtOut(
        server=name,
        time=at,
        snapshot=snapshot,
        in_force_since=snapshot.first_seen,
        last_confirmed=snapshot.last_seen,
        superseded_at=found.superseded_at,
        certain=at <= snapshot.last_seen,
        tools=tools,
        tool_version=tool_version,
    )


def _not_listed_at(session: ReadSession, name: str, snapshot: SnapshotRecord, tool: str, at: datetime) -> str:
    """Why a tool asked about at an instant is a 404: never listed, or in which versions it was."""
    runs = [run for run in queries.tool_history(session, snapshot.server_id, tool) if run.present]
    if not runs:
        return f"server {name!r} never listed a tool named {make_visible(tool)!r}"
    spans: list[list[int]] = []
    for run in runs:  # oldest first; runs of different definitions back to back make one span
        if spans and spans[-1][1] + 1 == run.from_version:
            spans[-1][1] = run.to_version
        else:
            spans.append([run.from_version, run.to_version])
    listed = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return (
        f"server {name!r}: version {snapshot.version} in force at {at.isoformat()} did not list "
        f"{make_visible(tool)!r}; it is in versions {listed}"
    )


@router.get(
    "/servers/{name}/tool-history",
    summary="One tool's history, the tool named in the query: for names no URL path carries (`.`, `..`)",
    responses=not_found("server or tool"),
)
def tool_history_by_query(
    server: TheServer,
    session: ReadSession,
    tool: Annotated[str, Query(description="The tool's name")],
    limit: Limit = 100,
    before: IntCursor = None,
) -> ToolHistory:
    return tool_history(server, session, tool, limit, before)


@router.get(
    "/servers/{name}/tools/{tool:toolname}/history",
    summary="Each definition one tool had, newest first, with what changed at each step",
    responses=not_found("server or tool"),
)
def tool_history(
    server: TheServer,
    session: ReadSession,
    tool: Annotated[str, Path(description="The tool's name (URL-encoded)")],
    limit: Limit = 100,
    before: IntCursor = None,
) -> ToolHistory:
    runs = queries.tool_history(session, server.id, tool) if unicode_text(tool) else []
    if not runs:
        raise HTTPException(404, f"server {server.name!r} never listed a tool named {make_visible(tool)!r}")
    newest_first = [r for r in reversed(runs) if before is None or r.from_version < before]
    return ToolHistory.of(newest_first, limit, lambda run: run.from_version, server=server.name, tool=tool)
