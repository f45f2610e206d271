"""A server's pages: its state, tools and versions; the diff between two versions; one tool's history."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from monitor.approvals import storage as approvals
from monitor.approvals.pages import resolvable_alerts, server_approvals
from monitor.core.clients import stored_profiles
from monitor.core.ijson import unicode_text
from monitor.core.roles import Permission
from monitor.core.states import AlertState
from monitor.core.text import make_visible, word_diff
from monitor.identity.callers import caller_of, page_read
from monitor.notify import silences
from monitor.servers.views import list_views
from monitor.store import queries
from monitor.store.models import Server
from monitor.store.queries.views import diff_views
from monitor.store.records import SEVERITIES, ServerRecord, ToolVersionRecord
from monitor.web.deps import ReadSession, Web, page_server_or_404
from monitor.web.diffview import ToolDiffView, hint_badges, tool_diff_view
from monitor.web.params import number_param
from monitor.web.rendering import render

router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])
TheServer = Annotated[ServerRecord, Depends(page_server_or_404)]
VERSIONS_PER_PAGE = 50


@router.get("/servers/{name}", response_class=HTMLResponse)
def server_page(
    request: Request, web: Web, server: TheServer, session: ReadSession, before: str | None = None
) -> HTMLResponse:
    cursor = number_param(before, "before")
    versions = queries.list_snapshots(session, server.id, limit=VERSIONS_PER_PAGE + 1, before=cursor)
    summaries = queries.version_summaries(session, [v.id for v in versions])
    current = server.current
    tools = queries.listing_tools(session, current.listing_id, current.id) if current else []
    fingerprints = queries.listing_fingerprints(session, server.current.listing_id) if server.current else {}
    alerts = queries.list_alerts(
        session, states=AlertState.unresolved(), server_id=server.id, worst_first=True, limit=20
    )
    attempts = queries.recent_attempts(session, server.id)
    views = list_views(server, session)
    more = len(versions) > VERSIONS_PER_PAGE
    versions = versions[:VERSIONS_PER_PAGE]
    tools.sort(key=lambda t: str(t.get("name")))
    return render(
        request,
        session,
        "server.html",
        nav="overview",
        server=server,
        versions=versions,
        summaries={sid: (count, SEVERITIES[::-1][rank]) for sid, (count, rank) in summaries.items()},
        older=versions[-1].version if more else None,
        tools=[(tool, hint_badges(tool), fingerprints.get(str(tool.get("name")))) for tool in tools],
        alerts=silences.mark_silenced(session, alerts, web.now()),
        poll_interval=web.config.monitor.poll_interval,
        attempts=attempts,
        **server_approvals(request, session, server),
        views=views if len(views) > 1 else [],
    )


@router.get("/servers/{name}/diff", response_class=HTMLResponse)
def diff_page(request: Request, web: Web, server: TheServer, session: ReadSession) -> HTMLResponse:
    params = request.query_params
    if server.current is None:
        return render(
            request, session, "diff.html", nav="overview", server=server, diff=None, tools=[], choices=[]
        )
    new_version = number_param(params.get("to"), "to") or server.current.version
    old_version = number_param(params.get("from"), "from") or max(1, new_version - 1)
    diff = queries.diff_versions(session, server.id, old_version, new_version)
    if diff is None:
        raise HTTPException(404, f"server {server.name!r} has no version {old_version} or {new_version}")
    return render(
        request,
        session,
        "diff.html",
        nav="overview",
        server=server,
        diff=diff,
        tools=[tool_diff_view(t) for t in diff.tools],
        instructions_diff=word_diff(*(text or "" for text in diff.instructions)) if diff.instructions else [],
        instruction_findings=[f for f in diff.findings if f.tool is None and f.field == "instructions"],
        choices=queries.list_snapshots(session, server.id, limit=500),
        can_approve=caller_of(request).may(Permission.APPROVE),
        resolvable=resolvable_alerts(session, server, new_version, None),
        raised=[
            alert
            for alert_id in queries.diff_alert_ids(session, server.id, old_version, new_version)
            if (alert := queries.find_alert(session, alert_id)) is not None
        ],
    )


@router.get("/servers/{name}/views/diff", response_class=HTMLResponse)
def views_diff_page(
    request: Request,
    server: TheServer,
    session: ReadSession,
    view: Annotated[str, Query(max_length=200)],
    base: Annotated[str | None, Query(max_length=200)] = None,
) -> HTMLResponse:
    """Two client views side by side (default base: the primary view): the listing the server shows one
    client and the one it shows the other, tool by tool, as `listing-varies-by-client` judges them."""
    base = base or stored_profiles(server.client)[0].view
    diff = diff_views(session, server.id, server.name, base, view)
    if diff is None:
        raise HTTPException(404, f"server {server.name!r} has no client view {base!r} or {view!r}")
    return render(
        request,
        session,
        "views_diff.html",
        nav="overview",
        server=server,
        diff=diff,
        tools=[tool_diff_view(t) for t in diff.tools],
    )


@router.get("/servers/{name}/definitions/{fingerprint}")
def raw_definition(server: TheServer, fingerprint: str, session: ReadSession) -> Response:
    """One stored tool definition as raw JSON, by its content address: where a page that collapsed a
    large definition links to."""
    definition = queries.server_definition(session, server.id, fingerprint) if fingerprint.isalnum() else None
    if definition is None:
        raise HTTPException(
            404, f"server {server.name!r} never listed a tool definition {fingerprint[:64]!r}"
        )
    body = json.dumps(definition, ensure_ascii=True, indent=2, sort_keys=True)
    # Valid JSON that no browser could read as markup, even one that ignores the content type.
    body = body.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Response(body, media_type="application/json", headers={"Content-Disposition": "inline"})


@router.get("/servers/{name}/tool", response_class=HTMLResponse)
def tool_page_by_query(
    request: Request, server: TheServer, session: ReadSession, tool: Annotated[str, Query()]
) -> HTMLResponse:
    """The tool page for a name no URL path carries (`.` and `..` are dot segments however encoded)."""
    return tool_page(request, server, tool, session)


@router.get("/servers/{name}/tools/{tool:toolname}", response_class=HTMLResponse)
def tool_page(request: Request, server: TheServer, tool: str, session: ReadSession) -> HTMLResponse:
    runs = queries.tool_history(session, server.id, tool) if unicode_text(tool) else []
    if not runs:
        raise HTTPException(404, f"server {server.name!r} never listed a tool named {make_visible(tool)!r}")
    steps: list[tuple[ToolVersionRecord, ToolDiffView | None]] = []
    previous: ToolVersionRecord | None = None
    for run in runs:
        if previous is None:
            steps.append((run, None))
        else:
            # The findings recorded at this step carry its schema rows: no per-view diff.
            change = queries.ToolChangeView(
                tool,
                previous.definition,
                run.definition,
                list(run.findings),
                old_fingerprint=previous.fingerprint,
                new_fingerprint=run.fingerprint,
            )
            steps.append((run, tool_diff_view(change)))
        previous = run
    steps.reverse()
    newest = runs[-1].definition
    return render(
        request,
        session,
        "tool.html",
        nav="overview",
        server=server,
        tool=tool,
        steps=steps,
        badges=hint_badges(newest) if newest is not None else None,
        approval_history=approvals.history(session, session.get_one(Server, server.id), tool),
    )


@router.get("/servers/{name}/polls/{attempt_id}/raw", response_class=PlainTextResponse)
def raw_payload_page(server: TheServer, attempt_id: str, session: ReadSession) -> PlainTextResponse:
    """What the server sent in a poll that could not be read as a listing: plain text, never rendered."""
    number = number_param(attempt_id, "attempt_id")
    raw = queries.raw_payload(session, server.id, number) if number is not None else None
    if raw is None:
        raise HTTPException(404, f"no kept payload for poll {make_visible(attempt_id)!r} of {server.name!r}")
    return PlainTextResponse(raw, headers={"Content-Disposition": "inline"})
