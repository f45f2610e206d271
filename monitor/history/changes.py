"""/api/v1/changes: stored findings across servers, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from monitor.core.rules import Severity
from monitor.identity.callers import may_read
from monitor.store import queries
from monitor.store.records import ChangeRecord
from monitor.web.deps import ReadSession, server_id_or_404
from monitor.web.schemas import (
    ERRORS,
    SERVER_NAME,
    ApiJSONResponse,
    IntCursor,
    Limit,
    Page,
    RuleId,
    ToolName,
    UtcDatetime,
    not_found,
    utc,
)
from monitor.web.strict import contradiction

router = APIRouter(
    prefix="/api/v1",
    tags=["changes"],
    dependencies=[Depends(may_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)


@router.get("/changes", summary="Findings across servers, newest first", responses=not_found("server"))
def list_changes(
    session: ReadSession,
    server: Annotated[str | None, Query(max_length=200, pattern=SERVER_NAME)] = None,
    min_severity: Severity | None = None,
    since: Annotated[
        UtcDatetime | None, Query(description="Detected at or after (inclusive); no offset means UTC")
    ] = None,
    until: Annotated[
        UtcDatetime | None, Query(description="Detected before (exclusive); no offset means UTC")
    ] = None,
    tool: ToolName = None,
    rule: RuleId = None,
    limit: Limit = 100,
    before: IntCursor = None,
) -> Page[ChangeRecord, int]:
    start = utc(since, ["query", "since"]) if since else None
    end = utc(until, ["query", "until"]) if until else None
    if start is not None and end is not None and start >= end:
        raise contradiction(("since", "until"), "since must be earlier than until")
    rows = queries.list_changes(
        session,
        server_id=server_id_or_404(session, server) if server is not None else None,
        min_severity=min_severity,
        since=start,
        until=end,
        tool=tool,
        rule=rule,
        limit=limit + 1,
        before=before,
    )
    return Page.of(rows, limit, lambda change: change.id)
