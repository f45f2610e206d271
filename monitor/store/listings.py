"""Content-addressed listing storage: each distinct listing once by fingerprint, each distinct tool
definition once by its own, and the diff of a new listing against a stored one, loading only the
tools that changed."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.diff import diff_changes
from monitor.core.findings import Finding, ToolChange
from monitor.core.fingerprint import CanonicalListing
from monitor.store.db import insert as _insert
from monitor.store.models import Listing, ListingTool, ToolDefinition

T = TypeVar("T")


def store_listing(session: Session, listing: CanonicalListing, now: datetime) -> int:
    """The listing's id, storing it and any tool definitions not yet known (no `_meta`: a listing is
    shared by the servers that serve it, and each version keeps its own, `Snapshot.metas`)."""
    existing = session.scalar(select(Listing.id).where(Listing.fingerprint == listing.fingerprint))
    if existing is not None:
        return existing
    insert = _insert(session)
    by_fingerprint = {listing.tool_fingerprint(name): name for name in listing.forms}
    rows: list[dict[str, Any]] = [
        {"fingerprint": fp, "name": name, "definition": _definition(listing, name)}
        for fp, name in by_fingerprint.items()
    ]
    for chunk in chunks(rows, 500):
        session.execute(
            insert(ToolDefinition).values(chunk).on_conflict_do_nothing(index_elements=["fingerprint"])
        )
    tool_ids: dict[str, int] = {}
    for fingerprints in chunks(list(by_fingerprint), 500):
        tool_ids.update(
            session.execute(
                select(ToolDefinition.fingerprint, ToolDefinition.id).where(
                    ToolDefinition.fingerprint.in_(fingerprints)
                )
            ).all()
        )
    listing_row = Listing(fingerprint=listing.fingerprint, tool_count=len(listing.forms), created_at=now)
    session.add(listing_row)
    session.flush()
    members: list[dict[str, Any]] = [
        {"listing_id": listing_row.id, "tool_id": tool_ids[fp], "position": position}
        for position, fp in enumerate(by_fingerprint)
    ]
    for chunk in chunks(members, 500):
        session.execute(insert(ListingTool).values(chunk))
    return listing_row.id


def _definition(listing: CanonicalListing, name: str) -> dict[str, Any]:
    return {key: value for key, value in listing.tools[name].items() if key != "_meta"}


def diff_against(session: Session, old_listing_id: int, new: CanonicalListing) -> list[Finding]:
    """Findings from the stored listing to the new one; only changed tools are loaded."""
    return list(diff_changes(changes_against(session, old_listing_id, new)))


def changes_against(session: Session, old_listing_id: int, new: CanonicalListing) -> list[ToolChange]:
    """The tools that differ from the stored listing to the new one, each with both definitions."""
    old_ids = dict(
        session.execute(
            select(ToolDefinition.name, ToolDefinition.fingerprint)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == old_listing_id)
        ).all()
    )
    new_ids = {name: new.tool_fingerprint(name) for name in new.forms}
    changed = sorted(
        name for name in old_ids.keys() | new_ids.keys() if old_ids.get(name) != new_ids.get(name)
    )
    old_changed = {fp for name, fp in old_ids.items() if name in changed}
    old_defs: dict[str, dict[str, Any]] = {}
    for chunk in chunks(sorted(old_changed), 500):
        old_defs.update(
            session.execute(
                select(ToolDefinition.name, ToolDefinition.definition).where(
                    ToolDefinition.fingerprint.in_(chunk)
                )
            ).all()
        )
    return [
        ToolChange(name, old_defs.get(name), _definition(new, name) if name in new.forms else None)
        for name in changed
    ]


def chunks(items: list[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
