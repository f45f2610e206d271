"""Migration 0019 (the installation id) on a database the 0017 release filled: it gets an id made once
and kept, alerts announced before the upgrade keep their bare id as their key (a PagerDuty incident
opened before it still resolves), new alerts get keys scoped by the installation, and going down to
0017 and up again keeps every alert."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, inspect, select
from sqlalchemy.orm import Session
from support.releases import OlderRows

from monitor.notify.alerts import Alerting
from monitor.notify.handling import resolve_by_hand
from monitor.sinks.pagerduty import PagerDutyWebhookConfig
from monitor.store import current_revision, downgrade, migrate
from monitor.store.installation import alert_keys
from monitor.store.models import Alert, Installation, WebhookDelivery

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def test_upgrade_keeps_the_keys_of_alerts_already_announced(fresh_engine: Engine) -> None:
    migrate(fresh_engine, "0017")
    with fresh_engine.begin() as connection:
        rows = OlderRows(connection, "servers", "alerts")
        server_id = rows.server("old", T0)
        first = rows.alert(server_id, "purge", T0)
        second = rows.alert(server_id, "wipe", T0)
    migrate(fresh_engine)

    with Session(fresh_engine) as session:
        installation = session.scalars(select(Installation)).one()
        keys = alert_keys(session)
    assert len(installation.id) == 36 and installation.first_keyed_alert == second + 1
    assert (keys.key(first), keys.key(second)) == (str(first), str(second)), "as PagerDuty knows them"
    assert keys.key(second + 1) == f"{installation.id}:{second + 1}"

    webhook = PagerDutyWebhookConfig(name="pd", routing_key_env="PD_KEY")
    alerting = Alerting([webhook], base_url="http://127.0.0.1:8000")
    with Session(fresh_engine) as session, session.begin():
        resolve_by_hand(session, first, T0 + timedelta(hours=1), by="ops", note=None, policy=alerting)
    with Session(fresh_engine) as session:
        (body,) = session.scalars(select(WebhookDelivery.body)).all()
    assert json.loads(body) == {"event_action": "resolve", "dedup_key": str(first)}, "the incident resolves"

    downgrade(fresh_engine, "0017")
    assert current_revision(fresh_engine) == "0017"
    with fresh_engine.connect() as connection:
        assert "installation" not in inspect(connection).get_table_names()
    migrate(fresh_engine)
    with Session(fresh_engine) as session:
        assert session.scalars(select(Alert.id).order_by(Alert.id)).all() == [first, second]
        again = session.scalars(select(Installation)).one()
    assert again.id != installation.id and again.first_keyed_alert == second + 1, "made anew, as documented"


def test_a_new_database_keys_every_alert(fresh_engine: Engine) -> None:
    migrate(fresh_engine)
    with Session(fresh_engine) as session:
        keys = alert_keys(session)
    assert keys.first_keyed_alert == 1 and keys.key(1) == f"{keys.installation}:1"
