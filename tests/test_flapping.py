"""`listing-flapping` (docs/contract.md section 5): a listing going back and forth is one alert, not a
stream."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session
from support import read_only_flip, record_poll, tool, webhook_secret

from monitor.config import ServerConfig
from monitor.core.findings import Severity
from monitor.notify.alerts import Alerting
from monitor.sinks.base import WebhookConfig
from monitor.store import Store
from monitor.store.models import Alert, FindingRecord, Server, WebhookDelivery
from monitor.store.registration import sync_servers

SECRET_ENV = "TEST_FLAPPING_SECRET"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def listing(read_only: bool) -> list[dict[str, Any]]:
    return read_only_flip(read_only, "export", description="Export a report.")


class Flapper:
    def __init__(self, engine: Engine) -> None:
        webhook = WebhookConfig(
            name="ops", url="http://127.0.0.1:9/hook", secret_env=SECRET_ENV, min_severity=Severity.MEDIUM
        )
        self.engine = engine
        self.store = Store(engine, hooks=[Alerting([webhook], base_url="http://127.0.0.1:8000")])
        self.server_id = sync_servers(
            self.store, [ServerConfig(name="mirror", transport="http", url="http://127.0.0.1:9/")], T0
        )["mirror"]
        self.at = T0

    def poll(self, read_only: bool, after: timedelta = timedelta(minutes=1)) -> None:
        self.at += after
        record_poll(self.store, self.server_id, listing(read_only), self.at)

    def alerts(self, rule: str | None = None) -> list[Alert]:
        with Session(self.engine) as session:
            query = select(Alert).order_by(Alert.id)
            return list(session.scalars(query.where(Alert.rule == rule) if rule else query))

    def deliveries(self, alert_id: int) -> list[tuple[str, dict[str, Any]]]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(WebhookDelivery)
                .where(WebhookDelivery.alert_id == alert_id)
                .order_by(WebhookDelivery.created_at)
            ).all()
        return [(row.event_type, json.loads(row.body)) for row in rows]


@pytest.fixture
def flapper(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Flapper:
    monkeypatch.setenv(SECRET_ENV, webhook_secret(b"flapping key"))
    return Flapper(engine)


def test_alternating_listings_for_ten_polls_are_one_flapping_alert(flapper: Flapper) -> None:
    for poll in range(10):
        flapper.poll(read_only=poll % 2 == 0)
    (flapping,) = flapper.alerts("listing-flapping")
    assert flapping.state == "open"
    deliveries = flapper.deliveries(flapping.id)
    assert 1 <= len(deliveries) <= 2 and deliveries[0][0] == "alert.opened"
    body = deliveries[-1][1]
    assert "went back to an earlier listing" in body["alert"]["message"]
    assert "(v2, v3, v4, v5" in body["alert"]["message"], "the versions involved"
    opened_after = [
        a for a in flapper.alerts() if a.rule != "listing-flapping" and a.opened_at > flapping.opened_at
    ]
    assert opened_after == [], "per-change alerts are held back while it flaps"
    with Session(flapper.engine) as session:
        revoked = session.scalars(
            select(FindingRecord).where(FindingRecord.rule == "read-only-revoked")
        ).all()
    assert len(revoked) == 5, "every change is still stored"


def test_a_deployment_that_never_goes_back_does_not_flap(flapper: Flapper) -> None:
    flapper.poll(read_only=True)
    for n in range(6):
        flapper.at += timedelta(minutes=1)
        tools = [*listing(True), tool(f"new_{n}", read_only=True)]
        record_poll(flapper.store, flapper.server_id, tools, flapper.at)
    assert flapper.alerts("listing-flapping") == []


def test_settling_resolves_the_flapping_alert_and_raises_what_it_settled_on(flapper: Flapper) -> None:
    for poll in range(8):
        flapper.poll(read_only=poll % 2 == 0)  # ends on read_only=False: worse than where it began
    (flapping,) = flapper.alerts("listing-flapping")
    flapper.poll(read_only=False, after=timedelta(minutes=30))
    assert flapper.alerts("listing-flapping")[0].state == "open", "not yet settled for the window"
    flapper.poll(read_only=False, after=timedelta(minutes=31))
    (flapping,) = flapper.alerts("listing-flapping")
    assert flapping.state == "resolved"
    assert [event for event, _ in flapper.deliveries(flapping.id)] == ["alert.opened", "alert.resolved"]
    revoked = [a for a in flapper.alerts("read-only-revoked") if a.state == "open"]
    assert len(revoked) == 1 and revoked[0].opened_at > flapping.opened_at, "the settled change is alerted"


def test_a_poll_looks_for_the_flapping_alert_only_while_one_may_be_open(flapper: Flapper) -> None:
    """The server's `flapping_alert_possible` is set with the alert and cleared by the first poll
    after it resolved; while it is clear, an unchanged poll of a healthy server reads no alert."""
    statements: list[str] = []
    event.listen(flapper.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    def unchanged_poll_reads_alerts(read_only: bool, after: timedelta = timedelta(minutes=1)) -> bool:
        statements.clear()
        flapper.poll(read_only, after)
        return any("alerts" in statement for statement in statements)

    def possible() -> bool:
        with Session(flapper.engine) as session:
            return bool(session.scalar(select(Server.flapping_alert_possible)))

    flapper.poll(read_only=True)
    assert not unchanged_poll_reads_alerts(read_only=True) and not possible()
    for poll in range(8):
        flapper.poll(read_only=poll % 2 != 0)  # ends on read_only=True, where it began
    assert flapper.alerts("listing-flapping")[0].state == "open" and possible()
    assert unchanged_poll_reads_alerts(read_only=True), "an open one must be found: it holds alerts back"
    flapper.poll(read_only=True, after=timedelta(minutes=61))
    assert flapper.alerts("listing-flapping")[0].state == "resolved" and possible()
    assert unchanged_poll_reads_alerts(read_only=True) and not possible(), "none found: cleared"
    assert not unchanged_poll_reads_alerts(read_only=True)


def test_a_flap_of_harmless_changes_is_a_medium_alert(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a description alternates (low): the flapping alert is medium, its catalog severity."""
    monkeypatch.setenv(SECRET_ENV, webhook_secret(b"flapping key"))
    flapper = Flapper(engine)
    for poll in range(8):
        flapper.at += timedelta(minutes=1)
        tools = [tool("lookup", read_only=True, description="Look up." if poll % 2 else "Look it up.")]
        record_poll(flapper.store, flapper.server_id, tools, flapper.at)
    (flapping,) = flapper.alerts("listing-flapping")
    assert flapping.severity == "medium" and flapper.alerts("description-changed") == []
