"""POST /api/v1/fingerprint: the fingerprint of a listing, for hosts that would rather send the tools.

A host that cannot run a JCS library sends the tools it cached and gets the fingerprint the
monitor would store for them (docs/fingerprint.md), each tool's own, and, when it names the
server, whether that is the server's current listing or which earlier version it is.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.fingerprint import CanonicalListing, NotIJSONError
from monitor.core.listing import ListingError, validate_tools
from monitor.identity.callers import may_read
from monitor.store import queries
from monitor.store.models import Listing, PollAttempt, Snapshot
from monitor.web.deps import ReadSession, ServerName, find_server_or_404
from monitor.web.schemas import ERRORS, SERVER_NAME, TOOLS_SCHEMA, ApiJSONResponse, not_found, unprocessable

router = APIRouter(
    prefix="/api/v1",
    tags=["fingerprint"],
    dependencies=[Depends(may_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)


class FingerprintIn(BaseModel):
    """A listing as a host cached it (all pages joined); other keys of a `tools/list` result
    (`nextCursor`, `ttlMs`, `cacheScope`, `_meta`) may be sent along and are ignored."""

    model_config = ConfigDict(extra="ignore")

    tools: list[dict[str, Any]] = Field(max_length=100_000, json_schema_extra=TOOLS_SCHEMA)
    server: Annotated[str | None, Field(max_length=200, pattern=SERVER_NAME)] = Field(
        default=None, description="Compare with this server's versions"
    )


class ServerMatch(BaseModel):
    name: str
    current_version: int | None = Field(description="The server's newest version; null if never polled")
    current_fingerprint: str | None
    matches_current: bool
    version: int | None = Field(
        description="The newest version of this server whose listing has this fingerprint; null if none"
    )


class FingerprintOut(BaseModel):
    fingerprint: str = Field(description="Lowercase hex SHA-256 of the RFC 8785 canonical listing")
    tool_count: int
    tools: dict[str, str] = Field(description="Each tool's own fingerprint (RFC 8785 of it without _meta)")
    server: ServerMatch | None = None


@router.post(
    "/fingerprint",
    summary="Fingerprint a listing as the monitor does (docs/contract.md section 2)",
    responses=not_found("server"),
)
def compute_fingerprint(body: FingerprintIn, session: ReadSession) -> FingerprintOut:
    try:
        listing = CanonicalListing.of(validate_tools(body.tools))
    except (ListingError, NotIJSONError) as exc:
        raise unprocessable(["body", "tools"], str(exc)) from None
    except RecursionError:
        raise unprocessable(["body", "tools"], "nested too deeply") from None
    match = _match(session, body.server, listing.fingerprint) if body.server is not None else None
    return FingerprintOut(
        fingerprint=listing.fingerprint,
        tool_count=len(listing.forms),
        tools={name: listing.tool_fingerprint(name) for name in sorted(listing.forms)},
        server=match,
    )


def _match(session: Session, name: str, fingerprint: str) -> ServerMatch:
    server = find_server_or_404(session, name)
    current = queries.current_snapshots(session, [server.id]).get(server.id)
    version = session.scalar(
        select(Snapshot.version)
        .join(Listing, Listing.id == Snapshot.listing_id)
        .where(Snapshot.server_id == server.id, Listing.fingerprint == fingerprint)
        .order_by(Snapshot.version.desc())
        .limit(1)
    )
    return ServerMatch(
        name=server.name,
        current_version=current.version if current else None,
        current_fingerprint=current.fingerprint if current else None,
        matches_current=current is not None and current.fingerprint == fingerprint,
        version=version,
    )


class MalformedOut(BaseModel):
    started_at: datetime
    error: str | None = Field(description="Why it could not be stored, and where")
    payload: str = Field(
        description='The listing as received, as JSON text (`{"tools": [...]}`), its first 1 MiB'
    )


@router.get(
    "/servers/{name}/malformed",
    summary="The server's newest listing that could not be stored, kept for review",
    responses=not_found("server or malformed listing"),
)
def latest_malformed(name: ServerName, session: ReadSession) -> MalformedOut:
    server = find_server_or_404(session, name)
    row = session.execute(
        select(PollAttempt.started_at, PollAttempt.error, PollAttempt.raw_payload)
        .where(PollAttempt.server_id == server.id, PollAttempt.raw_payload.is_not(None))
        .order_by(PollAttempt.id.desc())
        .limit(1)
    ).first()
    if row is None:
        raise HTTPException(404, f"server {server.name!r} has sent no listing that could not be stored")
    return MalformedOut(started_at=row.started_at, error=row.error, payload=row.raw_payload)
