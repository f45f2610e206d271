"""`listing-changed-silently` only where silence proves something (docs/contract.md section 5), through
the real Store.

The watch state is what the watch manager records on the server row; here it is written directly, so
each case says exactly which session covered the change.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session
from support import read_only_flip, record_poll

from monitor.config import ServerConfig
from monitor.notify.alerts import Alerting
from monitor.store import Store
from monitor.store.models import Alert, Server
from monitor.store.registration import sync_servers

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def listing(read_only: bool) -> list[dict[str, object]]:
    return read_only_flip(read_only, description="Purge a tenant.", others=[])


def watched(engine: Engine, server_id: int, since: datetime | None) -> None:
    with Session(engine) as session, session.begin():
        session.execute(
            update(Server)
            .where(Server.id == server_id)
            .values(watch_connected_since=since, list_changed_advertised=True)
        )


def silent_alerts(engine: Engine) -> list[Alert]:
    with Session(engine) as session:
        return list(session.scalars(select(Alert).where(Alert.rule == "listing-changed-silently")))


def change_under_watch(engine: Engine, config: ServerConfig, *, reconnected: bool = False) -> list[str]:
    alerting = Alerting(base_url="http://127.0.0.1:8000")
    store = Store(engine, hooks=[alerting])
    server_id = sync_servers(store, [config], T0)[config.name]
    watched(engine, server_id, T0 - timedelta(minutes=1))  # connected before the first poll
    record_poll(store, server_id, listing(True), T0, list_changed_advertised=True)
    record_poll(store, server_id, listing(True), T0 + timedelta(minutes=1), list_changed_advertised=True)
    if reconnected:  # the session dropped and came back after the old listing was last confirmed
        watched(engine, server_id, T0 + timedelta(minutes=1, seconds=30))
    outcome = record_poll(
        store, server_id, listing(False), T0 + timedelta(minutes=2), list_changed_advertised=True
    )
    record_poll(store, server_id, listing(False), T0 + timedelta(minutes=3), list_changed_advertised=True)
    return [finding.rule for finding in outcome.findings]


def test_a_stdio_upgrade_is_a_new_deployment_not_a_silent_change(engine: Engine) -> None:
    """Every stdio poll starts a new process; the watch session's own process still serves the old
    listing, so its silence proves nothing."""
    stdio = ServerConfig(name="files", transport="stdio", command="mcp-server-files")
    rules = change_under_watch(engine, stdio)
    assert "read-only-revoked" in rules
    assert "listing-changed-silently" not in rules
    assert silent_alerts(engine) == []


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_a_running_server_changing_without_a_notification_is_one_alert(
    engine: Engine, transport: str
) -> None:
    running = ServerConfig(name="tenants", transport=transport, url="http://127.0.0.1:9/mcp")
    rules = change_under_watch(engine, running)
    assert rules.count("listing-changed-silently") == 1
    assert len(silent_alerts(engine)) == 1


def test_a_watch_session_that_reconnected_is_healthy_only_since_then(engine: Engine) -> None:
    running = ServerConfig(name="tenants", transport="http", url="http://127.0.0.1:9/mcp")
    rules = change_under_watch(engine, running, reconnected=True)
    assert "listing-changed-silently" not in rules
    assert silent_alerts(engine) == []
