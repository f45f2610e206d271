"""`/api/v1/tokens` and `/api/v1/audit`, for admins: named tokens made, listed and revoked, and the
audit log read (docs/contract.md section 12)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, ConfigDict, Field

from monitor.config import parse_duration
from monitor.core.roles import Role
from monitor.identity.callers import may_administer
from monitor.identity.records import AuditRecord, TokenRecord
from monitor.identity.storage import TokenError, audit_events, create_token, list_tokens, revoke_token
from monitor.web.acts import Acting
from monitor.web.deps import ReadSession, Web
from monitor.web.schemas import ERRORS, INT32_MAX, SERVER_NAME, WRITE_ERRORS, ApiJSONResponse, ErrorOut

router = APIRouter(
    prefix="/api/v1",
    tags=["identity"],
    dependencies=[Depends(may_administer)],
    responses=ERRORS,
    default_response_class=ApiJSONResponse,
)
TokenName = Annotated[str, Path(min_length=1, max_length=100, pattern=SERVER_NAME)]


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, pattern=SERVER_NAME, description="Who or what uses it")
    role: Role
    expires: str | None = Field(
        default=None,
        pattern=r"^[0-9]{1,5}(ms|s|m|h|d)([0-9]{1,5}(ms|s|m|h|d))?$",
        examples=["90d"],
        description="How long it is valid (default: until revoked)",
    )


class TokenCreated(TokenRecord):
    secret: str = Field(description="Shown once, here: only its hash is kept")


@router.get("/tokens", summary="Named tokens (never their secrets)")
def tokens(session: ReadSession) -> list[TokenRecord]:
    return list_tokens(session)


@router.post(
    "/tokens",
    status_code=201,
    summary="Make a named token with a role; its secret is in this answer only",
    responses={**WRITE_ERRORS, 409: {"model": ErrorOut, "description": "The name is taken"}},
)
def make_token(body: TokenIn, act: Acting, web: Web) -> TokenCreated:
    try:
        expires = parse_duration(body.expires) if body.expires else None
    except ValueError as exc:
        raise HTTPException(422, f"body.expires: {exc}") from None
    try:
        record, secret = create_token(
            act.session,
            body.name,
            body.role,
            by=act.actor,
            now=act.at,
            expires=timedelta(seconds=expires) if expires else None,
            configured=web.identity.token_name,
        )
    except TokenError as exc:
        raise HTTPException(409, str(exc)) from None
    act.record("token.create", body.name, role=body.role.value, expires=body.expires)
    return TokenCreated(**record.model_dump(), secret=secret)


@router.delete(
    "/tokens/{name}",
    summary="Revoke a named token: it is refused from now on, and so are sessions signed in with it",
    responses={**WRITE_ERRORS, 404: {"model": ErrorOut, "description": "No token of that name"}},
)
def remove_token(name: TokenName, act: Acting) -> TokenRecord:
    try:
        record = revoke_token(act.session, name, by=act.actor, now=act.at)
    except TokenError as exc:
        raise HTTPException(404, str(exc)) from None
    act.record("token.revoke", name)
    return record


class AuditPage(BaseModel):
    items: list[AuditRecord]
    next_before: int | None = Field(description="Pass as `before` for the next (older) page")


@router.get("/audit", summary="The audit log: every change and every refused attempt, newest first")
def audit(
    session: ReadSession,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
    actor: Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00]*$")] = None,
    result: Annotated[str | None, Query(pattern="^(ok|refused|failed)$")] = None,
) -> AuditPage:
    items = audit_events(session, limit=limit, before=before, actor=actor, result=result)
    return AuditPage(items=items, next_before=items[-1].id if len(items) == limit else None)
