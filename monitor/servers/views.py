"""GET /api/v1/servers/{name}/views: what each client profile of a server is currently shown."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field
from sqlalchemy import select

from monitor.core.clients import stored_profiles
from monitor.identity.callers import may_read
from monitor.store.models import Listing
from monitor.store.records import ServerRecord
from monitor.store.views import current_views
from monitor.web.deps import ReadSession, server_or_404
from monitor.web.schemas import ERRORS, ApiJSONResponse, not_found

router = APIRouter(
    prefix="/api/v1",
    tags=["views"],
    dependencies=[Depends(may_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
TheServer = Annotated[ServerRecord, Depends(server_or_404)]


class ViewRecord(BaseModel):
    profile: str = Field(description="The view's name (the profile's label, or its client name)")
    client: dict[str, Any] = Field(description="clientInfo name and version, and the capabilities declared")
    fingerprint: str
    tool_count: int
    first_seen: datetime = Field(description="Since when this profile has been shown this listing")
    last_seen: datetime
    poll_count: int
    same_as_primary: bool = Field(description="Whether it is the listing of the server's primary profile")


@router.get(
    "/servers/{name}/views",
    summary="The listing each client profile is currently shown, primary first",
    responses=not_found("server"),
)
def list_views(server: TheServer, session: ReadSession) -> list[ViewRecord]:
    rows = current_views(session, server.id)
    listings = {
        row.id: (row.fingerprint, row.tool_count)
        for row in session.execute(
            select(Listing.id, Listing.fingerprint, Listing.tool_count).where(
                Listing.id.in_([view.listing_id for view in rows])
            )
        )
    }
    name = stored_profiles(server.client)[0].view
    rows.sort(key=lambda view: view.profile != name)  # the primary profile's view first
    primary = next((view.listing_id for view in rows if view.profile == name), None)
    return [
        ViewRecord(
            profile=view.profile,
            client=view.client,
            fingerprint=listings[view.listing_id][0],
            tool_count=listings[view.listing_id][1],
            first_seen=view.first_seen,
            last_seen=view.last_seen,
            poll_count=view.poll_count,
            same_as_primary=view.listing_id == primary,
        )
        for view in rows
    ]
