"""What a receiver ends up believing when deliveries to it fail for a while (docs/integrations.md,
"Alertmanager and PagerDuty"): each alert's events arrive in order, a re-post queued before a
resolution never follows it, a receiver's final refusal ends a delivery, keys are unique per
installation, and static labels reach Alertmanager and PagerDuty.

The Alertmanager here is the loopback receiver of `support.sinks`, which merges posts by
Alertmanager's own rule; `test_alertmanager_binary.py` runs the same outage against the real one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import support
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from support.sinks import Alertmanager, PagerDuty

from monitor.config import ConfigError, ServerConfig, load_config
from monitor.core.states import DeliveryState
from monitor.notify.alerts import Alerting
from monitor.notify.delivery import Deliverer
from monitor.notify.repost import repost_open_alerts
from monitor.sinks.alertmanager import AlertmanagerWebhookConfig
from monitor.sinks.base import WebhookConfig
from monitor.sinks.pagerduty import PagerDutyWebhookConfig
from monitor.store import Store, make_engine, migrate
from monitor.store.installation import alert_keys
from monitor.store.models import Alert, WebhookDelivery
from monitor.store.registration import sync_servers

ROUTING_ENV = "TEST_ORDER_PAGERDUTY_KEY"
ROUTING_KEY = "R0123456789abcdef0123456789abcde"
BASE_URL = "http://127.0.0.1:8000"


class Outage:
    """A server whose `purge_tenant` flips read-only -> writable -> read-only, with alert deliveries
    to one webhook that is unreachable (`down`, a refused port) or reachable (`up`) at will: the outbox
    rows belong to the webhook's name, so the same rows go to whichever URL the deliverer has."""

    def __init__(self, engine: Engine, webhook: WebhookConfig) -> None:
        self.engine = engine
        self.webhook = webhook
        self.alerting = Alerting([webhook], base_url=BASE_URL)
        self.store = Store(engine, hooks=[self.alerting])
        self.now = datetime.now(UTC) - timedelta(minutes=5)
        config = ServerConfig(name="docs", transport="http", url="http://127.0.0.1:9/mcp")
        self.server_id = sync_servers(self.store, [config], self.tick())["docs"]
        refused = webhook.model_copy(update={"url": support.refused_url()})
        self.down = Deliverer(engine, [refused], backoff_base=0.01, backoff_cap=0.05)
        # one at a time, in the outbox's order: what reaches the receiver last is what the outbox chose
        self.up = Deliverer(engine, [webhook], backoff_base=0.01, backoff_cap=0.05, concurrency=1)

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now

    def poll(self, read_only: bool) -> None:
        search = support.tool("search", read_only=True, description="Searches.")
        flip = support.read_only_flip(read_only, description="Purges a tenant.", others=[search])
        support.record_poll(self.store, self.server_id, flip, self.tick())

    def repost(self) -> int:
        """What `serve` does every minute, on the wall clock (a re-post expires in a minute)."""
        with Session(self.engine) as session, session.begin():
            return repost_open_alerts(session, self.alerting, datetime.now(UTC))

    async def deliver(self, deliverer: Deliverer) -> None:
        for _ in range(100):  # bounded: each pass attempts or settles at least one delivery
            if not await deliverer.deliver_due():
                return
        raise AssertionError("deliveries kept coming")

    def deliveries(self) -> list[WebhookDelivery]:
        with Session(self.engine) as session:
            return list(session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.created_at)))


async def test_a_repost_queued_before_a_resolve_never_reaches_alertmanager_after_it(engine: Engine) -> None:
    """Alertmanager is unreachable while the alert resolves: the re-post queued before that must not
    arrive after the resolution, or Alertmanager fires the alert again for its resolve_timeout."""
    with Alertmanager() as alertmanager:
        outage = Outage(engine, AlertmanagerWebhookConfig(name="am", url=alertmanager.url))
        outage.poll(read_only=True)
        outage.poll(read_only=False)
        await outage.deliver(outage.up)
        now = datetime.now(UTC)
        assert [a.firing(now) for a in alertmanager.alerts.values()] == [True]

        assert outage.repost() == 1
        await outage.down.deliver_due()  # refused: the re-post waits for its retry
        outage.poll(read_only=True)  # resolved meanwhile: an `alert.resolved` is queued
        await outage.deliver(outage.up)  # Alertmanager is back

        (only,) = alertmanager.alerts.values()
        assert only.resolved(datetime.now(UTC)), f"firing again after its resolution: {only.bodies}"
        assert [body.get("endsAt") is not None for body in only.bodies] == [False, True]
        states = {row.event_type: row.state for row in outage.deliveries()}
        assert states == {
            "alert.opened": "delivered",
            "alerts.firing": "superseded",
            "alert.resolved": "delivered",
        }


async def test_a_repost_leaves_out_only_the_alerts_resolved_since(engine: Engine) -> None:
    with Alertmanager() as alertmanager:
        outage = Outage(engine, AlertmanagerWebhookConfig(name="am", url=alertmanager.url))
        search = support.tool("search", read_only=True, description="Searches.")
        both = [search, support.tool("wipe", read_only=True), support.tool("purge", read_only=True)]
        support.record_poll(outage.store, outage.server_id, both, outage.tick())
        flipped = [search, support.tool("wipe", read_only=False), support.tool("purge", read_only=False)]
        support.record_poll(outage.store, outage.server_id, flipped, outage.tick())
        await outage.deliver(outage.up)
        assert outage.repost() == 1
        await outage.down.deliver_due()
        half = [search, support.tool("wipe", read_only=True), support.tool("purge", read_only=False)]
        support.record_poll(outage.store, outage.server_id, half, outage.tick())  # wipe's alert resolves
        await outage.deliver(outage.up)

        now = datetime.now(UTC)
        firing = {a.labels["tool"]: a.firing(now) for a in alertmanager.alerts.values()}
        assert firing == {"wipe": False, "purge": True}
        repost = next(row for row in outage.deliveries() if row.event_type == "alerts.firing")
        assert repost.state == "delivered" and "wipe" not in repost.body and "purge" in repost.body


async def test_an_alerts_events_reach_a_receiver_in_order_after_an_outage(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `trigger` failed and waits for its retry when the alert resolves: the `resolve` must not
    overtake it, or PagerDuty is left with an incident that nothing will resolve."""
    monkeypatch.setenv(ROUTING_ENV, ROUTING_KEY)
    with PagerDuty() as pagerduty:
        webhook = PagerDutyWebhookConfig(name="pd", url=pagerduty.url, routing_key_env=ROUTING_ENV)
        outage = Outage(engine, webhook)
        outage.poll(read_only=True)
        outage.poll(read_only=False)
        await outage.down.deliver_due()
        outage.poll(read_only=True)
        await outage.deliver(outage.up)
        assert [event.action for event in pagerduty.events] == ["trigger", "resolve"]


async def test_a_receivers_final_refusal_ends_the_delivery_with_its_words(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PagerDuty answers 400 to an event it will never take (here: a routing key of the wrong length),
    and says not to retry it: one attempt, `failed`, with what PagerDuty said."""
    monkeypatch.setenv(ROUTING_ENV, "too-short")
    with PagerDuty() as pagerduty:
        webhook = PagerDutyWebhookConfig(name="pd", url=pagerduty.url, routing_key_env=ROUTING_ENV)
        outage = Outage(engine, webhook)
        outage.poll(read_only=True)
        outage.poll(read_only=False)
        await outage.deliver(outage.up)
        (row,) = outage.deliveries()
        assert (row.state, row.attempts) == (DeliveryState.FAILED, 1)
        assert row.last_error is not None and row.last_error.startswith("HTTP 400: ")
        assert "32-character integration key" in row.last_error, "the receiver's words"
        assert len(pagerduty.rejected) == 1


@pytest.mark.parametrize("status", [408, 429, 500, 503])
async def test_a_passing_refusal_is_retried(engine: Engine, status: int) -> None:
    with support.Receiver() as receiver:
        receiver.replies.extend([support.Reply(status)] * 2)
        outage = Outage(engine, WebhookConfig(name="hook", url=receiver.url))
        outage.poll(read_only=True)
        outage.poll(read_only=False)
        await outage.deliver(outage.up)
        (row,) = outage.deliveries()
        assert (row.state, row.attempts) == (DeliveryState.DELIVERED, 3)


async def test_pagerduty_dedup_keys_differ_between_installations(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two monitors on one PagerDuty service (two environments, or a database rebuilt from scratch)
    each number their alerts from 1: the keys must not collide."""
    monkeypatch.setenv(ROUTING_ENV, ROUTING_KEY)
    other = make_engine(f"sqlite:///{tmp_path / 'other.db'}")
    migrate(other)
    try:
        with PagerDuty() as pagerduty:
            webhook = PagerDutyWebhookConfig(name="pd", url=pagerduty.url, routing_key_env=ROUTING_ENV)
            for database in (engine, other):
                outage = Outage(database, webhook)
                outage.poll(read_only=True)
                outage.poll(read_only=False)
                await outage.deliver(outage.up)
            with Session(engine) as one, Session(other) as two:
                ids = [s.scalars(select(Alert.id)).one() for s in (one, two)]
                keys = [alert_keys(one).key(ids[0]), alert_keys(two).key(ids[1])]
            assert [event.dedup_key for event in pagerduty.events] == keys
            assert keys[0] != keys[1] and ids == [1, 1]
    finally:
        other.dispose()


async def test_static_labels_reach_alertmanager_and_pagerduty(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ROUTING_ENV, ROUTING_KEY)
    with Alertmanager() as alertmanager, PagerDuty() as pagerduty:
        am = AlertmanagerWebhookConfig(name="am", url=alertmanager.url, labels={"env": "prod", "team": "ops"})
        pd = PagerDutyWebhookConfig(
            name="pd", url=pagerduty.url, routing_key_env=ROUTING_ENV, labels={"env": "prod"}
        )
        outage = Outage(engine, am)
        outage.alerting.webhooks.append(pd)
        outage.up = Deliverer(engine, [am, pd], backoff_base=0.01, backoff_cap=0.05)
        outage.poll(read_only=True)
        outage.poll(read_only=False)
        assert outage.repost() == 1
        await outage.deliver(outage.up)
        (only,) = alertmanager.alerts.values()
        assert only.labels["env"] == "prod" and only.labels["team"] == "ops"
        assert all(body["labels"]["env"] == "prod" for body in only.bodies), "re-posts too"
        assert alertmanager.rejected == [] and pagerduty.rejected == []
        (trigger,) = pagerduty.events
        assert trigger.body["payload"]["custom_details"]["env"] == "prod"


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('format = "alertmanager"\nlabels = { alertname = "x" }', "set by drift-monitor itself"),
        ('format = "alertmanager"\nlabels = { "bad-name" = "x" }', "use letters, digits and '_'"),
        ('format = "alertmanager"\nlabels = { __meta = "x" }', "not starting with a digit or '__'"),
        ('format = "alertmanager"\nlabels = { env = "" }', "must not be empty"),
        ('format = "pagerduty"\nrouting_key_env = "K"\nlabels = { findings = "x" }', "set by drift-monitor"),
        ('format = "standard"\nlabels = { env = "prod" }', "webhooks[0] ('w'): labels: unknown key"),
    ],
)
def test_static_labels_are_checked(tmp_path: Path, table: str, problem: str) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text(f'[[webhooks]]\nname = "w"\nurl = "http://127.0.0.1:9/x"\n{table}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="webhooks\\[0\\]") as error:
        load_config(path)
    assert problem in str(error.value)


def test_static_labels_in_the_config(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text(
        '[[webhooks]]\nname = "am"\nformat = "alertmanager"\nurl = "http://127.0.0.1:9093/api/v2/alerts"\n'
        'labels = { env = "prod" }\n',
        encoding="utf-8",
    )
    (webhook,) = load_config(path).webhooks
    assert isinstance(webhook, AlertmanagerWebhookConfig) and webhook.labels == {"env": "prod"}
