"""Flapping: a server whose listing keeps going back to an earlier version and away again.

Servers that omit annotations on some responses, or sit behind a load balancer with two builds, turn
every poll into a "change". Counting returns (a new version whose listing the server already served
before) over a window tells that apart from a deployment, which never goes back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.diff import diff_listings
from monitor.core.findings import Finding
from monitor.store.models import Listing, ListingTool, Snapshot, ToolDefinition


@dataclass(frozen=True)
class Returns:
    """The returns to an earlier listing among a server's versions that began since a time."""

    count: int
    versions: list[int]
    """Every version involved in the window, oldest first (those that returned and those they left)."""
    fingerprints: list[str]
    """The distinct listings the server alternated between, in first-seen order."""


def returns_since(session: Session, server_id: int, since: datetime) -> Returns:
    """Count the versions starting at or after `since` whose listing an earlier version already had.

    Reads the server's versions from the last one before `since` on (so a return's first leg counts),
    and for the listing ids, whether each appeared earlier in the whole history (one indexed query).
    """
    start = session.scalar(
        select(Snapshot.version)
        .where(Snapshot.server_id == server_id, Snapshot.first_seen < since)
        .order_by(Snapshot.version.desc())
        .limit(1)
    )
    rows = session.execute(
        select(Snapshot.version, Snapshot.listing_id, Snapshot.first_seen, Listing.fingerprint)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server_id, Snapshot.version >= (start or 1))
        .order_by(Snapshot.version)
    ).all()
    if not rows:
        return Returns(0, [], [])
    earlier = set(
        session.scalars(
            select(Snapshot.listing_id).where(
                Snapshot.server_id == server_id, Snapshot.version < rows[0].version
            )
        )
    )
    count = 0
    involved: list[int] = []
    fingerprints: list[str] = []
    for row in rows:
        if row.listing_id in earlier and row.first_seen >= since:
            count += 1
            involved.append(row.version)
            if row.fingerprint not in fingerprints:
                fingerprints.append(row.fingerprint)
        earlier.add(row.listing_id)
    if count:
        first = min(involved)
        involved = [row.version for row in rows if row.version >= first - 1]
        fingerprints = list(dict.fromkeys(row.fingerprint for row in rows if row.version >= first - 1))
    return Returns(count, involved, fingerprints)


def settled_changes(
    session: Session, server_id: int, baseline_version: int, current: Snapshot
) -> tuple[Snapshot, list[Finding]] | None:
    """What changed from the version before the flapping began to the one it settled on, and that version.

    While a server flaps, per-change alerts are held back; once it settles the caller stores these
    findings and raises them the usual way, so a flap that ends on a worse listing is alerted like
    any change. None when it settled where it started.
    """
    baseline = session.scalar(
        select(Snapshot).where(Snapshot.server_id == server_id, Snapshot.version == baseline_version)
    )
    if baseline is None or baseline.listing_id == current.listing_id:
        return None
    old, new = _tools(session, baseline.listing_id), _tools(session, current.listing_id)
    return baseline, diff_listings(old, new).findings


def _tools(session: Session, listing_id: int) -> list[dict[str, Any]]:
    return list(
        session.scalars(
            select(ToolDefinition.definition)
            .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
            .where(ListingTool.listing_id == listing_id)
        )
    )
