"""Registering a remote (http/sse) server in the database, as `POST /api/v1/servers` and
`drift-monitor import-registry` do: origin "api", so every connection is checked against
`[monitor] allowed_server_hosts`, and its headers (secrets) kept only to poll it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.core.states import ServerOrigin
from monitor.store.models import Server


def add_remote_server(
    session: Session,
    *,
    name: str,
    transport: str,
    url: str,
    headers: Mapping[str, str],
    now: datetime,
) -> bool:
    """Register the server, due at once; False (and nothing changed) when the name is taken."""
    if session.scalar(select(Server.id).where(Server.name == name)) is not None:
        return False
    session.add(
        Server(
            name=name,
            transport=transport,
            url=url,
            origin=ServerOrigin.API,
            created_at=now,
            consecutive_failures=0,
            headers=dict(headers) or None,
            era="handshake",
            next_poll_at=now,
        )
    )
    session.flush()
    return True
