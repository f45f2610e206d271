"""Client views: what each client profile of a server was shown, stored as spans like versions.

The primary profile's listing is the server's version history (`snapshots`); every profile,
the primary included, also keeps a span per distinct listing here, sharing the content-addressed
listings. When a view changes, the views are compared and each tool shown differently becomes a
`listing-varies-by-client` finding, raised in the poll's transaction like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from monitor.core.clients import ClientProfile
from monitor.core.findings import Finding
from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules.views import views_differ
from monitor.store.models import ClientView

StoreListing = Callable[[Session, CanonicalListing, dict[str, Any], datetime], int]


@dataclass(frozen=True)
class View:
    """One profile's listing from one poll."""

    profile: ClientProfile
    listing: CanonicalListing
    metas: dict[str, Any] = field(default_factory=dict)


@dataclass
class ViewComparison:
    findings: list[Finding] = field(default_factory=list)
    agreeing: frozenset[str] = frozenset()
    """Tools every view now shows alike: a `listing-varies-by-client` alert on them is resolved."""


def record_views(
    session: Session,
    *,
    server_id: int,
    server_name: str,
    primary: View,
    primary_listing_id: int,
    others: Sequence[View],
    now: datetime,
    store_listing: StoreListing,
) -> ViewComparison:
    """Extend or start each view's span; compare the views when any of them changed."""
    changed = _record(session, server_id, primary, primary_listing_id, now)
    for view in others:
        listing_id = store_listing(session, view.listing, view.metas, now)
        changed = _record(session, server_id, view, listing_id, now) or changed
    if not changed or not others:
        return ViewComparison()
    findings: list[Finding] = []
    for view in others:
        findings += views_differ(
            server_name, primary.profile.view, primary.listing, view.profile.view, view.listing
        )
    names = set(primary.listing.forms).union(*(view.listing.forms for view in others))
    return ViewComparison(findings, frozenset(names - {f.tool for f in findings if f.tool}))


_VIEWS = cast(Table, ClientView.__table__)
_NEWEST = (
    select(_VIEWS.c.id)
    .where(_VIEWS.c.server_id == bindparam("of_server"), _VIEWS.c.profile == bindparam("of_profile"))
    .order_by(_VIEWS.c.first_seen.desc(), _VIEWS.c.id.desc())
    .limit(1)
    .scalar_subquery()
)
_EXTEND = (
    update(_VIEWS)
    .where(_VIEWS.c.id == _NEWEST, _VIEWS.c.listing_id == bindparam("of_listing"))
    .values(
        last_seen=bindparam("seen", type_=_VIEWS.c.last_seen.type),
        poll_count=_VIEWS.c.poll_count + 1,
        client=bindparam("wire", type_=_VIEWS.c.client.type),
    )
)
"""The view's newest span grows when it holds the listing: built once, one statement per poll where
reading the span and updating it took two, and no ORM object loaded for it."""


def _record(session: Session, server_id: int, view: View, listing_id: int, now: datetime) -> bool:
    """True when the view shows a listing other than its last one (or is new)."""
    extended = session.connection().execute(
        _EXTEND,
        {
            "of_server": server_id,
            "of_profile": view.profile.view,
            "of_listing": listing_id,
            "seen": now,
            "wire": view.profile.wire(),
        },
    )
    if extended.rowcount == 1:
        return False
    last = session.scalar(
        select(ClientView)
        .where(ClientView.server_id == server_id, ClientView.profile == view.profile.view)
        .order_by(ClientView.first_seen.desc(), ClientView.id.desc())
        .limit(1)
    )
    if last is not None and last.listing_id == listing_id:
        last.last_seen = now
        last.poll_count += 1
        last.client = view.profile.wire()
        return False
    session.add(
        ClientView(
            server_id=server_id,
            profile=view.profile.view,
            client=view.profile.wire(),
            listing_id=listing_id,
            first_seen=now,
            last_seen=now,
            poll_count=1,
        )
    )
    session.flush()
    return True


def current_views(session: Session, server_id: int) -> list[ClientView]:
    """The newest span of each of the server's views, primary (oldest view) first."""
    rows = session.scalars(
        select(ClientView).where(ClientView.server_id == server_id).order_by(ClientView.id.desc())
    ).all()
    newest: dict[str, ClientView] = {}
    for row in rows:
        newest.setdefault(row.profile, row)
    return sorted(newest.values(), key=lambda row: _first_id(rows, row.profile))


def _first_id(rows: Sequence[ClientView], profile: str) -> int:
    return min(row.id for row in rows if row.profile == profile)
