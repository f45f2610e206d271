"""Client views: what each client profile of a server was shown, stored as spans like versions.

The primary profile's listing is the server's version history (`snapshots`); every profile,
the primary included, also keeps a span per distinct listing here, sharing the content-addressed
listings. When a view changes, the views are compared and each tool shown differently becomes a
`listing-varies-by-client` finding, raised in the poll's transaction like any other; and a view
other than the primary one is diffed against its own previous listing with the tool rules, so a
tool only some clients see is judged like any other (`read-only-revoked` whatever the profile order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.orm import Session

from monitor.core.clients import ClientProfile
from monitor.core.findings import Finding
from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules.views import views_differ
from monitor.core.text import make_visible
from monitor.store.listings import diff_against
from monitor.store.models import ClientView, FindingRecord, Listing, ListingTool, ToolDefinition

Definitions = dict[str, tuple[str, dict[str, Any]]]
"""A listing's tools for decisions: name -> (definition fingerprint, definition)."""
StoreListing = Callable[[Session, CanonicalListing, datetime], int]


@dataclass(frozen=True)
class View:
    """One profile's listing from one poll."""

    profile: ClientProfile
    listing: CanonicalListing


@dataclass
class ViewComparison:
    findings: list[Finding] = field(default_factory=list)
    agreeing: frozenset[str] = frozenset()
    """Tools every view now shows alike: a `listing-varies-by-client` alert on them is resolved."""
    changes: list[Finding] = field(default_factory=list)
    """What the tool rules found in views other than the primary one, each against the view's own
    previous listing (`detail.view` names the view)."""
    changed: bool = False
    """Some view shows a listing other than its last one: decisions rest on the views too."""


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
    complete: bool = True,
    recheck: bool = False,
) -> ViewComparison:
    """Extend or start each view's span; diff each other view that changed against its previous
    listing, and compare the views when any of them changed (or `recheck`). `complete`: every view of
    the server is among them, so tools they show alike are shown alike to every client."""
    changed, _ = _record(session, server_id, primary, primary_listing_id, now)
    changes: list[Finding] = []
    for view in others:
        listing_id = store_listing(session, view.listing, now)
        moved, before = _record(session, server_id, view, listing_id, now)
        changed = changed or moved
        if moved and before is not None:
            found = diff_against(session, before, view.listing)
            changes += (_in_view(finding, view.profile.view) for finding in found)
    if not (changed or recheck) or not others:
        return ViewComparison(changed=changed)
    findings: list[Finding] = []
    for view in others:
        findings += views_differ(
            server_name,
            primary.profile.view,
            primary.listing,
            view.profile.view,
            view.listing,
            same_capabilities=set(primary.profile.capabilities) == set(view.profile.capabilities),
        )
    names = set(primary.listing.forms).union(*(view.listing.forms for view in others))
    agreeing = frozenset(names - {f.tool for f in findings if f.tool}) if complete else frozenset()
    return ViewComparison(findings, agreeing, changes, changed=changed)


def _in_view(finding: Finding, view: str) -> Finding:
    """A tool rule's finding in a view other than the primary one: it says which view it was seen in."""
    detail = finding.detail
    detail = {**detail, "view": view} if isinstance(detail, dict) else {"view": view, "rule_detail": detail}
    message = f"{finding.message} (as listed to client {make_visible(view)!r})"
    return replace(finding, detail=detail, message=message)


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


_SAME = (False, None)
"""`_record`'s answer for a view that shows its last listing again."""


def _record(
    session: Session, server_id: int, view: View, listing_id: int, now: datetime
) -> tuple[bool, int | None]:
    """Whether the view shows a listing other than its last one, and the id of the listing it showed
    before (None: the view is new, or unchanged)."""
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
        return _SAME
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
        return _SAME
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
    return True, last.listing_id if last is not None else None


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


@dataclass(frozen=True)
class ViewListing:
    """One client view's current listing, as decisions read it."""

    profile: str
    client: dict[str, Any]
    """What the server was told: `{name, version, capabilities}`."""
    fingerprint: str
    tools: Definitions


def decision_views(session: Session, server_id: int, since: datetime | None) -> list[ViewListing]:
    """The current listing of each view seen since `since` (the current version's first poll: a view
    whose polls fail since then still counts, a profile dropped before it does not), primary first."""
    views = [view for view in current_views(session, server_id) if since is None or view.last_seen >= since]
    fingerprints = dict(
        session.execute(
            select(Listing.id, Listing.fingerprint).where(Listing.id.in_({v.listing_id for v in views}))
        ).all()
    )
    tools = _listing_tools(session, {view.listing_id for view in views})
    return [
        ViewListing(view.profile, view.client, fingerprints[view.listing_id], tools.get(view.listing_id, {}))
        for view in views
    ]


def first_view_tools(session: Session, server_id: int) -> Definitions:
    """Tools as every view that listed them first listed them, when those first listings agree: what
    trust on first use approves of tools the primary view never listed."""
    first: dict[str, int] = {}
    for row in session.scalars(
        select(ClientView)
        .where(ClientView.server_id == server_id)
        .order_by(ClientView.first_seen, ClientView.id)
    ):
        first.setdefault(row.profile, row.listing_id)
    per_listing = _listing_tools(session, set(first.values()))
    agreed: Definitions = {}
    disputed: set[str] = set()
    for listing_id in first.values():
        for name, held in per_listing.get(listing_id, {}).items():
            if name in agreed and agreed[name][0] != held[0]:
                disputed.add(name)
            agreed.setdefault(name, held)
    return {name: held for name, held in agreed.items() if name not in disputed}


def _listing_tools(session: Session, listing_ids: set[int]) -> dict[int, Definitions]:
    tools: dict[int, Definitions] = {}
    if not listing_ids:
        return tools
    for listing_id, name, fingerprint, definition in session.execute(
        select(
            ListingTool.listing_id, ToolDefinition.name, ToolDefinition.fingerprint, ToolDefinition.definition
        )
        .join(ToolDefinition, ToolDefinition.id == ListingTool.tool_id)
        .where(ListingTool.listing_id.in_(sorted(listing_ids)))
    ):
        tools.setdefault(listing_id, {})[name] = (fingerprint, definition)
    return tools


def not_yet_found(changes: Sequence[Finding], found: Sequence[Finding]) -> list[Finding]:
    """The changes other client views showed, less those the primary view's diff (or an earlier view)
    already found: one change all views show is one finding."""
    seen = {(f.rule, f.tool, f.field, repr(f.old), repr(f.new)) for f in found}
    kept: list[Finding] = []
    for finding in changes:
        key = (finding.rule, finding.tool, finding.field, repr(finding.old), repr(finding.new))
        if key not in seen:
            seen.add(key)
            kept.append(finding)
    return kept


def not_recorded_last(session: Session, server_id: int, findings: list[Finding]) -> list[Finding]:
    """The findings of a comparison made although no view changed, less each one the tool's latest
    comparison already recorded: a difference that lasts is one finding, not one per recheck."""
    rule = findings[0].rule
    tools = sorted({f.tool for f in findings if f.tool is not None})
    latest: dict[str | None, set[str]] = {}
    newest = (
        select(FindingRecord.tool, func.max(FindingRecord.detected_at).label("at"))
        .where(
            FindingRecord.server_id == server_id, FindingRecord.rule == rule, FindingRecord.tool.in_(tools)
        )
        .group_by(FindingRecord.tool)
        .subquery()
    )
    for tool, message in session.execute(
        select(FindingRecord.tool, FindingRecord.message)
        .join(
            newest,
            (FindingRecord.tool == newest.c.tool) & (FindingRecord.detected_at == newest.c.at),
        )
        .where(FindingRecord.server_id == server_id, FindingRecord.rule == rule)
    ):
        latest.setdefault(tool, set()).add(message)
    return [f for f in findings if f.message not in latest.get(f.tool, set())]
