"""Point in time: the listing a server served at an instant, for incident review."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from monitor.core.times import utc_text
from monitor.identity.callers import page_read
from monitor.store import queries
from monitor.web.deps import ReadSession, find_server_or_404
from monitor.web.diffview import HintBadge, hint_badges
from monitor.web.params import instant_param
from monitor.web.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])


@router.get("/at", response_class=HTMLResponse)
def at_page(
    request: Request, session: ReadSession, server: str | None = None, time: str | None = None
) -> HTMLResponse:
    instant = instant_param(time) if time else None
    found = None
    tools: list[tuple[dict[str, Any], list[HintBadge]]] = []
    message = ""
    if server and instant is not None:
        record = find_server_or_404(session, server)
        found = queries.snapshot_at(session, record.name, instant)
        if found is not None:
            listing = queries.listing_tools(session, found.snapshot.listing_id, found.snapshot.id)
            listing.sort(key=lambda t: str(t.get("name")))
            tools = [(tool, hint_badges(tool)) for tool in listing]
        else:
            first = queries.first_snapshot_time(session, record.id)
            message = (
                f"{record.name} had no recorded listing at that time; its first version was seen "
                f"{utc_text(first)}."
                if first
                else f"{record.name} has no recorded listing yet."
            )
    return render(
        request,
        session,
        "at.html",
        nav="at",
        names=queries.server_names(session),
        server=server or "",
        time_value=instant.strftime("%Y-%m-%dT%H:%M:%S") if instant else "",
        instant=instant,
        found=found,
        tools=tools,
        message=message,
    )
