"""Config-file servers registered in the database, with the approval mode their config sets.

Every process that polls (`serve`, `drift-monitor poll`) registers the servers of its config at
start; several may do so at once on an empty database. No secret from a config file is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.config import ServerConfig
from monitor.core.states import ApprovalAction, ApprovalMode, ServerOrigin
from monitor.store.access import Approval
from monitor.store.db import insert
from monitor.store.generations import decisions_changed, names_changed
from monitor.store.models import Server
from monitor.store.polls import Store


def sync_servers(store: Store, servers: Iterable[ServerConfig], now: datetime) -> dict[str, int]:
    """Register config servers (no secrets kept) and return their ids by name."""
    ids: dict[str, int] = {}
    with store.sessions.begin() as session:
        for config in servers:
            # Several instances may start at once on an empty database: the first insert wins.
            session.execute(
                insert(session)(Server)
                .values(
                    name=config.name,
                    origin=ServerOrigin.CONFIG,
                    created_at=now,
                    consecutive_failures=0,
                    transport=config.transport,
                    era=config.era,
                )
                .on_conflict_do_nothing(index_elements=["name"])
            )
            server = session.scalars(select(Server).where(Server.name == config.name).with_for_update()).one()
            server.origin = ServerOrigin.CONFIG  # a config file wins over an API registration of the name
            server.headers = None
            server.transport = config.transport
            server.url = config.url
            server.command = config.command
            server.era = config.era
            set_mode(
                session,
                server,
                config.approval,
                actor="config file",
                note="approval mode from the config file",
                now=now,
            )
            server.client = [profile.model_dump() for profile in config.client]
            session.flush()
            ids[config.name] = server.id
        names_changed(session)
    return ids


def set_mode(
    session: Session, server: Server, mode: ApprovalMode, *, actor: str, note: str, now: datetime
) -> bool:
    """Change the server's approval mode, recording who did it; False when it already was `mode`."""
    if server.approval == mode:
        return False
    server.approval = mode.value
    decisions_changed(server)
    session.add(
        Approval(
            server_id=server.id,
            action=ApprovalAction.MODE,
            mode=mode.value,
            actor=actor,
            note=note,
            created_at=now,
        )
    )
    session.flush()
    return True
