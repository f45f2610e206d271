"""Tokens and the audit log in the database.

A token's secret is 32 random bytes, shown once; only its SHA-256 is stored (a secret that long needs
no slow hash: nobody can guess it, and a leaked table reveals none). Looking a token up is one indexed
read by that hash. Audit events are only ever added: changes in the transaction that makes them, so
a change and its record commit together; refused attempts on their own (`monitor.identity.audit`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, delete, select, update
from sqlalchemy.orm import Session

from monitor.core.roles import CONFIG_NAME, DEFAULT_TOKEN_NAME, Caller, Role, Via
from monitor.identity.records import AuditRecord, TokenRecord
from monitor.store.access import ApiToken, AuditEvent, WebKey
from monitor.store.db import insert
from monitor.store.generations import tokens_changed
from monitor.store.retention import Progress, count_rows, delete_in_batches

SECRET_PREFIX = "dm_"  # noqa: S105 - a prefix, not a secret
"""Tokens start with this, so a leaked one is recognisable (secret scanners, logs)."""
USE_RECORDED_EVERY = timedelta(minutes=1)


class TokenError(ValueError):
    """A token change that cannot be made; the message says why."""


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.strip().encode("utf-8", "surrogatepass")).hexdigest()


def create_token(
    session: Session,
    name: str,
    role: Role,
    *,
    by: str,
    now: datetime,
    expires: timedelta | None,
    configured: str = DEFAULT_TOKEN_NAME,
) -> tuple[TokenRecord, str]:
    """A new token and its secret (returned once, never stored). Neither the configured token's
    name (`configured`: `api_token_name`) nor `CONFIG_NAME` may be taken: the audit log would not
    tell the two apart, and a dashboard session names the configured token `CONFIG_NAME`."""
    if name == CONFIG_NAME:
        raise TokenError(f"{CONFIG_NAME!r} is reserved for the configured token")
    if name == configured:
        raise TokenError(f"{name!r} is the configured token's name ([monitor] api_token_name)")
    if session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None:
        raise TokenError(f"a token named {name!r} exists already (revoke it, or pick another name)")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        name=name,
        role=role.value,
        secret_hash=secret_hash(secret),
        created_at=now,
        created_by=by,
        expires_at=now + expires if expires else None,
    )
    session.add(row)
    session.flush()
    tokens_changed(session)
    return TokenRecord.model_validate(row), secret


def revoke_token(session: Session, name: str, *, by: str, now: datetime) -> TokenRecord:
    row = session.scalar(select(ApiToken).where(ApiToken.name == name).with_for_update())
    if row is None:
        raise TokenError(f"no token named {name!r}")
    if row.revoked_at is None:
        row.revoked_at, row.revoked_by = now, by
        tokens_changed(session)
    return TokenRecord.model_validate(row)


def list_tokens(session: Session) -> list[TokenRecord]:
    return [
        TokenRecord.model_validate(row) for row in session.scalars(select(ApiToken).order_by(ApiToken.name))
    ]


def token_caller(session: Session, secret: str, now: datetime, source: str) -> Caller | None:
    """The caller a named token's secret is, while it is neither revoked nor expired."""
    row = session.execute(
        select(
            ApiToken.name, ApiToken.role, ApiToken.expires_at, ApiToken.revoked_at, ApiToken.last_used_at
        ).where(ApiToken.secret_hash == secret_hash(secret))
    ).first()
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        return None
    if row.last_used_at is None or now - row.last_used_at >= USE_RECORDED_EVERY:
        session.execute(update(ApiToken).where(ApiToken.name == row.name).values(last_used_at=now))
    return Caller(row.name, Role(row.role), Via.TOKEN, source)


@dataclass(frozen=True)
class TokenState:
    """What identifying a named token's caller needs of its row (`monitor.identity.known`)."""

    name: str
    role: Role
    expires_at: datetime | None
    revoked: bool
    last_used_at: datetime | None

    def valid(self, now: datetime) -> bool:
        return not self.revoked and (self.expires_at is None or self.expires_at > now)


def token_state(session: Session, hashed: str) -> TokenState | None:
    """The named token whose secret hashes to `hashed`, whatever its state (None: no such token)."""
    row = session.execute(
        select(
            ApiToken.name, ApiToken.role, ApiToken.expires_at, ApiToken.revoked_at, ApiToken.last_used_at
        ).where(ApiToken.secret_hash == hashed)
    ).first()
    if row is None:
        return None
    return TokenState(row.name, Role(row.role), row.expires_at, row.revoked_at is not None, row.last_used_at)


def record_token_use(session: Session, name: str, at: datetime) -> None:
    """When a token was last used (recorded at most every `USE_RECORDED_EVERY`), never moved back."""
    session.execute(
        update(ApiToken)
        .where(ApiToken.name == name, (ApiToken.last_used_at.is_(None)) | (ApiToken.last_used_at < at))
        .values(last_used_at=at)
    )


def named_caller(session: Session, name: str, now: datetime, source: str, via: Via) -> Caller | None:
    """The caller a dashboard session signed in with token `name` is, while the token is valid."""
    row = session.execute(
        select(ApiToken.role, ApiToken.expires_at, ApiToken.revoked_at).where(ApiToken.name == name)
    ).first()
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        return None
    return Caller(name, Role(row.role), via, source)


def tokens_exist(session: Session) -> bool:
    """Whether any named token is in force (then nothing is open to anonymous callers)."""
    return session.scalar(select(ApiToken.id).where(ApiToken.revoked_at.is_(None)).limit(1)) is not None


def web_key(session: Session) -> bytes:
    """The key that signs sessions: made by the first instance that needs it, shared by every other
    (commits `session`)."""
    key = session.scalar(select(WebKey.key).where(WebKey.id == 1))
    if key is None:
        statement = insert(session)(WebKey).values(id=1, key=secrets.token_bytes(32))
        session.execute(statement.on_conflict_do_nothing(index_elements=["id"]))
        session.commit()
        key = session.scalar(select(WebKey.key).where(WebKey.id == 1))
    assert key is not None, "inserted or found in this transaction"
    return bytes(key)


def record_event(
    session: Session,
    caller: Caller,
    action: str,
    target: str,
    *,
    at: datetime,
    result: str = "ok",
    detail: dict[str, Any] | None = None,
) -> None:
    """Add an audit event to the caller's transaction."""
    session.add(
        AuditEvent(
            at=at,
            actor=caller.name,
            role=caller.role.value if caller.role else None,
            via=caller.via.value,
            source=caller.source[:200],
            action=action,
            target=target,
            result=result,
            detail=detail,
        )
    )


def audit_events(
    session: Session,
    *,
    limit: int,
    before: int | None = None,
    actor: str | None = None,
    result: str | None = None,
) -> list[AuditRecord]:
    """Audit events, newest first."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if before is not None:
        query = query.where(AuditEvent.id < before)
    if actor is not None:
        query = query.where(AuditEvent.actor == actor)
    if result is not None:
        query = query.where(AuditEvent.result == result)
    return [AuditRecord.model_validate(row) for row in session.scalars(query)]


def prune_audit(
    engine: Engine,
    *,
    older_than: datetime,
    batch_size: int,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> int:
    """Delete audit events from before `older_than` (only `drift-monitor prune --audit-older-than`)."""
    old = AuditEvent.at < older_than
    if dry_run:
        return count_rows(engine, AuditEvent, old)

    deleted = delete_in_batches(
        engine,
        AuditEvent.id,
        old,
        lambda connection, chosen: {
            "audit_events": connection.execute(delete(AuditEvent).where(*chosen)).rowcount
        },
        batch_size=batch_size,
        progress=progress,
    )
    return deleted.get("audit_events", 0)
