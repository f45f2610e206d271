"""Stored findings across servers, newest first, with the versions each was found between."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, aliased

from monitor.core.rules import Severity
from monitor.store.models import FindingRecord, Server, Snapshot
from monitor.store.records import ChangeRecord

_FROM = aliased(Snapshot)
_TO = aliased(Snapshot)


def change_query() -> Any:
    """The columns of a ChangeRecord, for any filter on findings."""
    return (
        select(
            FindingRecord.id,
            Server.name.label("server"),
            FindingRecord.detected_at,
            FindingRecord.rule,
            FindingRecord.severity,
            FindingRecord.tool,
            FindingRecord.field,
            FindingRecord.old,
            FindingRecord.new,
            FindingRecord.message,
            FindingRecord.detail,
            _FROM.version.label("from_version"),
            _TO.version.label("to_version"),
            FindingRecord.silence_id,
        )
        .join(Server, Server.id == FindingRecord.server_id)
        .outerjoin(_FROM, _FROM.id == FindingRecord.from_snapshot_id)
        .outerjoin(_TO, _TO.id == FindingRecord.to_snapshot_id)
    )


def list_changes(
    session: Session,
    *,
    server_id: int | None = None,
    min_severity: Severity | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    tool: str | None = None,
    rule: str | None = None,
    limit: int,
    before: int | None = None,
) -> list[ChangeRecord]:
    """Findings newest first, worst first within one poll; `before` is the previous page's last id.
    `tool` and `rule` match exactly (a tool's name is whatever the server sent)."""
    query = change_query()
    if tool is not None:
        query = query.where(FindingRecord.tool == tool)
    if rule is not None:
        query = query.where(FindingRecord.rule == rule)
    if server_id is not None:
        query = query.where(FindingRecord.server_id == server_id)
    if min_severity is not None:
        query = query.where(FindingRecord.severity_rank >= min_severity.rank)
    if since is not None:
        query = query.where(FindingRecord.detected_at >= since)
    if until is not None:
        query = query.where(FindingRecord.detected_at < until)
    if before is not None:
        cursor = session.execute(
            select(FindingRecord.detected_at, FindingRecord.severity_rank).where(FindingRecord.id == before)
        ).first()
        if cursor is None:
            query = query.where(FindingRecord.id < before)
        else:
            at, rank = cursor
            query = query.where(
                or_(
                    FindingRecord.detected_at < at,
                    and_(FindingRecord.detected_at == at, FindingRecord.severity_rank < rank),
                    and_(
                        FindingRecord.detected_at == at,
                        FindingRecord.severity_rank == rank,
                        FindingRecord.id < before,
                    ),
                )
            )
    query = query.order_by(
        FindingRecord.detected_at.desc(), FindingRecord.severity_rank.desc(), FindingRecord.id.desc()
    ).limit(limit)
    return [ChangeRecord.model_validate(row) for row in session.execute(query)]
