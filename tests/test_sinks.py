"""Alertmanager and PagerDuty sinks (docs/contract.md section 11) through the real outbox, against
receivers shaped like them."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import support
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from support.sinks import Alertmanager, PagerDuty

from monitor.config import ConfigError, ServerConfig, load_config
from monitor.notify.alerts import Alerting
from monitor.notify.delivery import Deliverer
from monitor.notify.handling import acknowledge
from monitor.notify.repost import repost_open_alerts
from monitor.sinks.alertmanager import AlertmanagerWebhookConfig
from monitor.sinks.base import WebhookConfig
from monitor.sinks.pagerduty import PagerDutyWebhookConfig
from monitor.store import Store
from monitor.store.installation import alert_keys
from monitor.store.models import Alert, DeliveryAttempt, WebhookDelivery
from monitor.store.registration import sync_servers

ROUTING_ENV = "TEST_PAGERDUTY_ROUTING_KEY"
ROUTING_KEY = "R0123456789abcdef0123456789abcde"
BASE_URL = "http://127.0.0.1:8000"


def tools(read_only: bool) -> list[dict[str, Any]]:
    search = support.tool("search", read_only=True, description="Searches.")
    return support.read_only_flip(read_only, description="Purges a tenant.", others=[search])


class Flip:
    """A server whose `purge_tenant` flips read-only -> writable -> read-only, recorded through the store."""

    def __init__(self, engine: Engine, webhooks: list[WebhookConfig]) -> None:
        self.engine = engine
        self.alerting = Alerting(webhooks, base_url=BASE_URL)
        self.store = Store(engine, hooks=[self.alerting])
        self.now = datetime.now(UTC) - timedelta(minutes=5)
        config = ServerConfig(name="docs", transport="http", url="http://127.0.0.1:9/mcp")
        self.server_id = sync_servers(self.store, [config], self.tick())["docs"]
        self.deliverer = Deliverer(engine, webhooks, backoff_base=0.01, backoff_cap=0.05)

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def poll(self, read_only: bool) -> None:
        support.record_poll(self.store, self.server_id, tools(read_only), self.tick())

    async def deliver(self) -> None:
        while await self.deliverer.deliver_due():
            pass

    def alert(self) -> Alert:
        with Session(self.engine) as session:
            return session.scalars(select(Alert)).one()


def repost(session: Session, flip: Flip) -> int:
    """What `serve` does every minute; now, not on the flip's clock (a re-post expires in a minute)."""
    return repost_open_alerts(session, flip.alerting, datetime.now(UTC))


async def test_alertmanager_gets_one_alert_reposted_while_open_and_ended_on_resolve(engine: Engine) -> None:
    with Alertmanager() as alertmanager:
        flip = Flip(engine, [AlertmanagerWebhookConfig(name="am", url=alertmanager.url)])
        flip.poll(read_only=True)
        flip.poll(read_only=False)
        await flip.deliver()
        assert alertmanager.rejected == []
        (only,) = alertmanager.alerts.values()
        alert = flip.alert()
        assert only.labels == {
            "alertname": "read-only-revoked",
            "severity": "critical",
            "server": "docs",
            "tool": "purge_tenant",
        }
        assert only.generator_url == f"{BASE_URL}/alerts/{alert.id}"
        assert "purge_tenant" in only.annotations["summary"]
        assert not only.explicit_end, "firing: Alertmanager keeps it until resolve_timeout"

        with Session(engine) as session, session.begin():
            assert repost(session, flip) == 1
        with Session(engine) as session, session.begin():
            assert repost(session, flip) == 0, "one pending re-post at most"
        await flip.deliver()
        (only,) = alertmanager.alerts.values()
        assert only.posts == 2, "re-posted: the same alert, kept firing"

        flip.poll(read_only=True)  # the fix
        await flip.deliver()
        assert alertmanager.rejected == []
        (only,) = alertmanager.alerts.values()
        assert only.posts == 3
        assert only.explicit_end and only.resolved(datetime.now(UTC))
        assert only.starts_at < only.ends_at
        with Session(engine) as session, session.begin():
            assert repost(session, flip) == 0, "nothing open to re-post"


async def test_pagerduty_trigger_acknowledge_resolve_with_one_dedup_key(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ROUTING_ENV, ROUTING_KEY)
    with PagerDuty() as pagerduty:
        webhook = PagerDutyWebhookConfig(name="pd", url=pagerduty.url, routing_key_env=ROUTING_ENV)
        flip = Flip(engine, [webhook])
        flip.poll(read_only=True)
        flip.poll(read_only=False)
        await flip.deliver()
        alert = flip.alert()
        with Session(engine) as session, session.begin():
            acknowledge(session, alert.id, flip.tick(), by="dana", policy=flip.alerting)
        await flip.deliver()
        flip.poll(read_only=True)
        await flip.deliver()

        assert pagerduty.rejected == []
        assert [event.action for event in pagerduty.events] == ["trigger", "acknowledge", "resolve"]
        with Session(engine) as session:
            key = alert_keys(session).key(alert.id)
        assert {event.dedup_key for event in pagerduty.events} == {key}
        assert {event.routing_key for event in pagerduty.events} == {ROUTING_KEY}
        trigger = pagerduty.events[0].body["payload"]
        assert trigger["severity"] == "critical" and trigger["source"] == "docs"
        assert "read-only-revoked" in trigger["summary"] and "purge_tenant" in trigger["summary"]
        assert pagerduty.events[0].body["links"][0]["href"] == f"{BASE_URL}/alerts/{alert.id}"

        with Session(engine) as session:
            bodies = session.scalars(select(WebhookDelivery.body)).all()
            assert bodies and all(ROUTING_KEY not in body for body in bodies), "the key is never stored"
            assert session.scalar(select(DeliveryAttempt.status_code).limit(1)) == 202


async def test_pagerduty_without_its_routing_key_fails_and_is_recorded(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ROUTING_ENV, raising=False)
    with PagerDuty() as pagerduty:
        webhook = PagerDutyWebhookConfig(name="pd", url=pagerduty.url, routing_key_env=ROUTING_ENV)
        flip = Flip(engine, [webhook])
        flip.poll(read_only=True)
        flip.poll(read_only=False)
        assert await flip.deliverer.deliver_due() == 1
        assert pagerduty.events == [] and pagerduty.rejected == []
        with Session(engine) as session:
            row = session.scalars(select(WebhookDelivery)).one()
            assert row.state == "pending" and ROUTING_ENV in (row.last_error or "")


@pytest.mark.parametrize(
    ("severity", "expected"),
    [("critical", "critical"), ("high", "error"), ("medium", "warning"), ("low", "info"), ("info", "info")],
)
def test_pagerduty_severities(severity: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor.sinks.pagerduty import PagerDuty as PagerDutySink

    alert = {
        "id": 7,
        "rule": "r",
        "severity": severity,
        "server": "s",
        "tool": None,
        "message": "m",
        "opened_at": "2026-01-01T00:00:00Z",
        "url": "http://x/alerts/7",
        "key": "9d3c0f1e-5a7b-4c2d-8e6f-0a1b2c3d4e5f:7",
    }
    webhook = PagerDutyWebhookConfig(name="pd", routing_key_env=ROUTING_ENV)
    payload = {"type": "alert.opened", "alert": alert, "findings": []}
    event = PagerDutySink.body(payload, webhook)
    assert event["payload"]["severity"] == expected and event["dedup_key"] == alert["key"]
    stored = PagerDutySink.render(payload, webhook)  # the outbox's body: the event, without the routing key
    assert json.loads(stored) == event and "routing_key" not in event
    monkeypatch.setenv(ROUTING_ENV, ROUTING_KEY)
    sent = json.loads(PagerDutySink(webhook).content(stored))
    assert sent == {"routing_key": ROUTING_KEY, **event}
    status, answer = PagerDuty().handle(sent)  # a trigger PagerDuty's Events API v2 accepts
    assert status == 202 and answer["dedup_key"] == alert["key"], answer


def test_sink_config(tmp_path: Any) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text(
        '[[webhooks]]\nname = "pd"\nformat = "pagerduty"\nrouting_key_env = "PD_KEY"\n'
        '[[webhooks]]\nname = "am"\nformat = "alertmanager"\nurl = "http://alertmanager:9093/api/v2/alerts"\n',
        encoding="utf-8",
    )
    pd, am = load_config(path).webhooks
    assert pd.url == "https://events.pagerduty.com/v2/enqueue"
    assert am.url.endswith("/api/v2/alerts")
    path.write_text('[[webhooks]]\nname = "pd"\nformat = "pagerduty"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="routing_key_env: Field required"):
        load_config(path)


@pytest.mark.usefixtures("no_leaked_processes")
@pytest.mark.slow
def test_serve_flips_reach_alertmanager_and_pagerduty(tmp_path: Path, database_url: str) -> None:
    """End to end through `serve`: a real MCP server whose purge_tenant loses readOnlyHint, then gets
    it back. Alertmanager holds one alert (read-only-revoked, critical), re-posted while open and
    ended on resolve; PagerDuty gets trigger then resolve with one dedup_key."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)), encoding="utf-8")
    env = {**os.environ, ROUTING_ENV: ROUTING_KEY}
    with (
        Alertmanager() as alertmanager,
        PagerDuty() as pagerduty,
        support.http_server("fastmcp_server.py", str(tools_file)) as mcp_url,
    ):
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "1s"\npoll_timeout = "10s"\n'
            'alert_repost_interval = "1s"\n\n'
            f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n\n'
            f'[[webhooks]]\nname = "am"\nformat = "alertmanager"\nurl = "{alertmanager.url}"\n\n'
            f'[[webhooks]]\nname = "pd"\nformat = "pagerduty"\nurl = "{pagerduty.url}"\n'
            f'routing_key_env = "{ROUTING_ENV}"\nmin_severity = "critical"\n',
            encoding="utf-8",
        )
        support.migrate_config(config, env)
        with support.serving(config, env) as running:
            support.wait_until(
                "a first poll",
                lambda: "server tenants: new version 1 " in running.output(),  # its log line
                timeout=support.WAIT,
                alive=[running],
            )
            tools_file.write_text(json.dumps(tools(read_only=False)), encoding="utf-8")
            assert alertmanager.wait_for(lambda am: any(a.posts >= 3 for a in am.alerts.values())), (
                "opened, then re-posted while open" + running.tail()
            )
            assert pagerduty.wait_for(lambda pd: len(pd.events) >= 1), running.tail()
            tools_file.write_text(json.dumps(tools(read_only=True)), encoding="utf-8")
            assert alertmanager.wait_for(lambda am: all(a.explicit_end for a in am.alerts.values())), (
                running.tail()
            )
            assert pagerduty.wait_for(lambda pd: [e.action for e in pd.events][-1:] == ["resolve"])
            assert running.stop() == 0, running.output()
            assert ROUTING_KEY not in running.output(), "the routing key is never logged"
    (only,) = alertmanager.alerts.values()
    assert only.labels["alertname"] == "read-only-revoked" and only.labels["severity"] == "critical"
    assert only.labels["server"] == "tenants" and only.labels["tool"] == "purge_tenant"
    assert alertmanager.rejected == [] and pagerduty.rejected == []
    assert [e.action for e in pagerduty.events] == ["trigger", "resolve"]
    assert len({e.dedup_key for e in pagerduty.events}) == 1
