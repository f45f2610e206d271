"""/api/v1/silences: mute findings by server, tool and/or rule until a time, with who and why."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from monitor.config import parse_duration
from monitor.core.rules import CATALOG
from monitor.identity.callers import may_read, may_respond
from monitor.notify import handling, silences
from monitor.store.records import SilenceRecord
from monitor.web.acts import Acting
from monitor.web.deps import ReadSession, Web
from monitor.web.schemas import (
    ERRORS,
    NO_NUL,
    SERVER_NAME,
    WRITE_ERRORS,
    ApiJSONResponse,
    ErrorOut,
    StoredText,
    not_found,
    unprocessable,
    utc,
)

router = APIRouter(
    prefix="/api/v1",
    tags=["silences"],
    responses=ERRORS,  # each route says who may use it (monitor.core.roles)
    default_response_class=ApiJSONResponse,
)


RULE_IDS: list[JsonValue] = [rule for rule in sorted(CATALOG)]
SAID = r"^[^\x00]*[^\x00\s][^\x00]*$"
"""Text that says something: not only white space, and no NUL."""


class SilenceCreate(BaseModel):
    """Mute matching findings until `ends_at`, or for `duration` (`"2h"`, `"1h30m"`); say who and why.

    At least one of server, tool and rule; a field left out matches anything."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["ends_at"],
                    "properties": {"ends_at": {"type": "string"}, "duration": {"not": {}}},
                },
                {
                    "required": ["duration"],
                    "properties": {"duration": {"type": "string"}, "ends_at": {"not": {}}},
                },
            ],
            # present and not null: `"tool": null` matches anything, as a field left out does
            "anyOf": [
                {"required": [field], "properties": {field: {"not": {"type": "null"}}}}
                for field in ("server", "tool", "rule")
            ],
        },
    )

    server: str | None = Field(default=None, max_length=200, pattern=SERVER_NAME)
    tool: StoredText | None = Field(default=None, min_length=1, max_length=1000, pattern=NO_NUL)
    rule: str | None = Field(default=None, json_schema_extra={"enum": RULE_IDS})
    ends_at: AwareDatetime | None = None
    duration: str | None = Field(
        default=None, pattern=r"^[0-9]{1,5}(ms|s|m|h|d)([0-9]{1,5}(ms|s|m|h|d))?$", examples=["2h"]
    )
    reason: str = Field(min_length=1, max_length=2000, pattern=SAID)
    created_by: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=SAID,
        description="Free text kept in the reason (`for <created_by>: ...`); the actor is the token's name",
    )

    resolve_alerts: bool = Field(
        default=False,
        description="Also resolve the open and acknowledged alerts it matches, their cause this silence "
        "(`silenced by NAME until T`): Silence this, from an alert",
    )

    def why(self) -> str:
        return f"for {self.created_by}: {self.reason}" if self.created_by else self.reason


@router.get("/silences", summary="Silences: active ones first", dependencies=[Depends(may_read)])
def list_silences(web: Web, session: ReadSession, active: bool = False) -> list[SilenceRecord]:
    return silences.list_silences(session, now=web.now(), active_only=active)


ENDED: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorOut, "description": "It would end before it starts: ends_at is not in the future"}
}


@router.post(
    "/silences",
    status_code=201,
    summary="Create a silence",
    dependencies=[Depends(may_respond)],
    responses={**WRITE_ERRORS, **not_found("server"), **ENDED},
)
def create_silence(web: Web, body: SilenceCreate, act: Acting) -> SilenceRecord:
    session, now = act.session, act.at
    if (body.ends_at is None) == (body.duration is None):
        raise unprocessable(["body"], "give exactly one of ends_at and duration")
    if body.ends_at is not None:
        ends_at = utc(body.ends_at, ["body", "ends_at"])
    else:
        try:
            ends_at = now + timedelta(seconds=parse_duration(body.duration))
        except ValueError:  # the pattern holds, so it can only be zero
            raise HTTPException(409, "duration: a silence of no time would end before it starts") from None
    try:
        created = silences.create_silence(
            session,
            server=body.server,
            tool=body.tool,
            rule=body.rule,
            ends_at=ends_at,
            created_by=act.actor,
            reason=body.why(),
            now=now,
        )
    except silences.UnknownServer as exc:
        raise HTTPException(404, str(exc)) from None
    except silences.EndsTooSoon as exc:
        raise HTTPException(409, str(exc)) from None
    except silences.SilenceError as exc:
        raise unprocessable(["body"], str(exc)) from None
    act.record(
        "silence.create", f"silence {created.id}", ends_at=created.ends_at.isoformat(), reason=body.why()
    )
    if body.resolve_alerts:
        resolved = handling.resolve_silenced(session, created, now, by=act.actor, policy=web.alerting)
        act.record("alert.resolve", f"silence {created.id}", alerts=resolved)
    return created


@router.delete(
    "/silences/{silence_id}",
    summary="Expire a silence now (what it muted stays muted; nothing is resolved)",
    dependencies=[Depends(may_respond)],
    responses={**WRITE_ERRORS, **not_found("silence")},
)
def expire_silence(silence_id: Annotated[int, Path(ge=1, le=2**31 - 1)], act: Acting) -> SilenceRecord:
    expired = silences.expire_silence(act.session, silence_id, act.at)
    if expired is None:
        raise HTTPException(404, f"no silence {silence_id}")
    act.record("silence.expire", f"silence {silence_id}")
    return expired
