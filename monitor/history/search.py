"""Incident search: one box that finds a tool by name on every server, and what it claimed at an
instant: the definition in force, since when, and the definitions before and after it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse

from monitor.core.ijson import storable
from monitor.identity.callers import page_read
from monitor.store import queries
from monitor.web.deps import ReadSession
from monitor.web.diffview import HintBadge, hint_badges
from monitor.web.params import instant_param
from monitor.web.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
MATCHES_SHOWN = 50
"""Matches listed for one search: a name fragment common enough to match more is refined instead."""
CLAIMS_SHOWN = 20
"""Matches answered at an instant (each reads one tool's history): fewer, so the answer stays quick."""


@dataclass(frozen=True)
class ClaimAt:
    """One matching tool on one server at the instant asked about."""

    match: queries.ToolMatch
    found: queries.InForce | None
    """The server version in force; None when the server had no listing yet."""
    around: queries.ToolAround | None
    """The tool's definition run at that version and its neighbours; None if not yet listed."""
    badges: list[HintBadge]
    instant: datetime

    @property
    def certain(self) -> bool:
        return self.found is not None and self.instant <= self.found.snapshot.last_seen


@router.get("/search", response_class=HTMLResponse)
def search_page(
    request: Request, session: ReadSession, q: str | None = None, time: str | None = None
) -> HTMLResponse:
    text = (q or "").strip()
    if len(text) > 200 or not storable(text):
        raise HTTPException(422, "q: a tool name of at most 200 characters, without NUL")
    instant = instant_param(time) if time else None
    shown = MATCHES_SHOWN if instant is None else CLAIMS_SHOWN
    matches = queries.find_tools(session, text, limit=shown + 1) if text else []
    more = len(matches) > shown
    matches = matches[:shown]
    claims: list[ClaimAt] = []
    if instant is not None:
        for match in matches:
            found = queries.snapshot_at(session, match.server, instant)
            around = (
                queries.tool_around(session, match.server_id, match.tool, found.snapshot.version)
                if found is not None
                else None
            )
            definition = around.current.definition if around is not None else None
            badges = hint_badges(definition) if definition is not None else []
            claims.append(ClaimAt(match, found, around, badges, instant))
    return render(
        request,
        session,
        "search.html",
        nav="search",
        query=text,
        time_value=instant.strftime("%Y-%m-%dT%H:%M:%S") if instant else "",
        instant=instant,
        matches=matches,
        more=more,
        claims=claims,
    )
