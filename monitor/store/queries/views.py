"""Two client views of one server side by side: what the server shows one client and not another."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules.views import views_differ
from monitor.store.models import ClientView
from monitor.store.queries.history import ToolChangeView, _definitions, _fingerprints, _members
from monitor.store.records import FindingFields
from monitor.store.views import current_views


@dataclass(frozen=True)
class ViewsDiff:
    base: ClientView
    other: ClientView
    tools: list[ToolChangeView]
    """Each tool the two views show differently: `old` as the base view shows it, `new` as the other."""


def diff_views(session: Session, server_id: int, server: str, base: str, other: str) -> ViewsDiff | None:
    """The current listings of two views of the server, tool by tool, with the findings the
    `listing-varies-by-client` rule makes of them now; None when either view does not exist."""
    views = {view.profile: view for view in current_views(session, server_id)}
    if base not in views or other not in views:
        return None
    old_members = _members(session, views[base].listing_id)
    new_members = _members(session, views[other].listing_id)
    changed = sorted(
        n for n in old_members.keys() | new_members.keys() if old_members.get(n) != new_members.get(n)
    )
    ids = [old_members[n] for n in changed if n in old_members] + [
        new_members[n] for n in changed if n in new_members
    ]
    definitions = _definitions(session, ids)
    fingerprints = _fingerprints(session, ids)
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
    same = set(views[base].client.get("capabilities") or {}) == set(
        views[other].client.get("capabilities") or {}
    )
    found = views_differ(
        server,
        base,
        CanonicalListing.of([t.old for t in tools.values() if t.old is not None]),
        other,
        CanonicalListing.of([t.new for t in tools.values() if t.new is not None]),
        same_capabilities=same,
    )
    for finding in found:
        if finding.tool in tools:
            tools[finding.tool].findings.append(FindingFields.model_validate(finding.to_dict()))
    ordered = sorted(tools.values(), key=lambda t: (-max((f.rank for f in t.findings), default=-1), t.name))
    return ViewsDiff(views[base], views[other], ordered)
