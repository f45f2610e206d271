"""/api/v1/silences: mute findings by server, tool and/or rule until a time, with who and why."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from monitor.config import parse_duration
from monitor.core.text import make_visible
from monitor.notify import silences
from monitor.store.records import SilenceRecord
from monitor.webapp.api.schemas import (
    ERRORS,
    NO_NUL,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    not_found,
    unprocessable,
    utc,
)
from monitor.webapp.deps import ReadSession, Web, WriteSession, db_safe, require_read, require_write

router = APIRouter(
    prefix="/api/v1",
    tags=["silences"],
    dependencies=[Depends(require_read)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)


class SilenceCreate(BaseModel):
    """Mute matching findings until `ends_at`, or for `duration` (`"2h"`, `"30m"`); say who and why."""

    model_config = ConfigDict(extra="forbid")

    server: str | None = Field(default=None, max_length=200, pattern=SERVER_NAME)
    tool: str | None = Field(default=None, min_length=1, max_length=1000, pattern=NO_NUL)
    rule: str | None = Field(default=None, max_length=64, pattern=r"^[a-z0-9-]+$")
    ends_at: AwareDatetime | None = None
    duration: str | None = Field(default=None, max_length=40, examples=["2h"])
    created_by: str = Field(min_length=1, max_length=200, pattern=NO_NUL)
    reason: str = Field(min_length=1, max_length=2000, pattern=NO_NUL)


@router.get("/silences", summary="Silences: active ones first")
def list_silences(web: Web, session: ReadSession, active: bool = False) -> list[SilenceRecord]:
    return silences.list_silences(session, now=web.now(), active_only=active)


@router.post(
    "/silences",
    status_code=201,
    summary="Create a silence",
    dependencies=[Depends(require_write)],
    responses=WRITE_ERRORS,
)
def create_silence(web: Web, body: SilenceCreate, session: WriteSession) -> SilenceRecord:
    now = web.now()
    if (body.ends_at is None) == (body.duration is None):
        raise unprocessable(["body"], "give exactly one of ends_at and duration")
    if body.tool is not None and not db_safe(body.tool):
        raise unprocessable(["body", "tool"], "must not contain NUL characters or lone surrogates")
    if body.ends_at is not None:
        ends_at = utc(body.ends_at, ["body", "ends_at"])
    else:
        try:
            ends_at = now + timedelta(seconds=parse_duration(body.duration))
        except (ValueError, OverflowError) as exc:
            raise unprocessable(["body", "duration"], make_visible(str(exc))) from None
    try:
        return silences.create_silence(
            session,
            server=body.server,
            tool=body.tool,
            rule=body.rule,
            ends_at=ends_at,
            created_by=body.created_by,
            reason=body.reason,
            now=now,
        )
    except silences.SilenceError as exc:
        raise unprocessable(["body"], str(exc)) from None


@router.delete(
    "/silences/{silence_id}",
    summary="Expire a silence now (what it muted stays muted; nothing is resolved)",
    dependencies=[Depends(require_write)],
    responses={**WRITE_ERRORS, **not_found("silence")},
)
def expire_silence(
    web: Web, silence_id: Annotated[int, Path(ge=1, le=2**31 - 1)], session: WriteSession
) -> SilenceRecord:
    expired = silences.expire_silence(session, silence_id, web.now())
    if expired is None:
        raise HTTPException(404, f"no silence {silence_id}")
    return expired
