"""Alert lifecycle through the real Store and its poll hook, on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import support
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session
from support import Receiver, record_poll, webhook_secret

from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.rules import Severity
from monitor.notify.alerts import Alerting
from monitor.notify.delivery import Deliverer
from monitor.notify.handling import AlertResolved, acknowledge
from monitor.notify.lifecycle import open_or_attach, resolve_matching
from monitor.sinks.base import WebhookConfig
from monitor.store import Store
from monitor.store.models import Alert, AlertFinding, FindingRecord, Server, Snapshot, WebhookDelivery
from monitor.store.registration import sync_servers

SECRET_ENV = "TEST_ALERT_WEBHOOK_SECRET"
KEY = b"alert webhook key"
BASE_URL = "http://127.0.0.1:8000"
NEVER = 3600.0
"""An idle poll that never comes during a test: a delivery within the receiver's wait was woken."""


class Clock:
    """Poll times a little in the past, one second apart, so deliveries they enqueue are due at once."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC) - timedelta(minutes=5)

    def tick(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def tool(name: str, *, read_only: bool = True, **fields: Any) -> dict[str, Any]:
    """A described tool, read-only unless said otherwise."""
    fields.setdefault("description", f"The {name} tool.")
    return support.tool(name, read_only=read_only, **fields)


def hook(
    name: str = "ops", min_severity: str = "high", url: str = "http://127.0.0.1:9/hook"
) -> WebhookConfig:
    return WebhookConfig(name=name, url=url, secret_env=SECRET_ENV, min_severity=Severity(min_severity))


class Harness:
    def __init__(self, engine: Engine, alerting: Alerting, unreachable_after: int = 3) -> None:
        self.engine = engine
        self.alerting = alerting
        self.store = Store(engine, unreachable_after=unreachable_after, hooks=[alerting])
        self.clock = Clock()
        config = ServerConfig(name="docs", transport="http", url="http://127.0.0.1:9/mcp")
        self.server_id = sync_servers(self.store, [config], self.clock.tick())["docs"]

    def succeed(self, tools: list[dict[str, Any]]) -> Any:
        return record_poll(self.store, self.server_id, tools, self.clock.tick())

    def fail(self) -> Any:
        at = self.clock.tick()
        return self.store.record_failure(self.server_id, "connect", "refused", started_at=at, finished_at=at)

    def alerts(self) -> list[Alert]:
        with Session(self.engine) as session:
            return list(session.scalars(select(Alert).order_by(Alert.id)))

    def outbox(self) -> list[tuple[str, str, dict[str, Any]]]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(WebhookDelivery).order_by(WebhookDelivery.created_at, WebhookDelivery.webhook)
            )
            return [(row.webhook, row.event_type, json.loads(row.body)) for row in rows]

    def finding_count(self, alert_id: int) -> int:
        with Session(self.engine) as session:
            return int(session.scalar(select(func.count()).where(AlertFinding.alert_id == alert_id)) or 0)


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, webhook_secret(KEY))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(KEY) as running:
        yield running


async def test_read_only_revoked_opens_once_and_resolves_when_it_flips_back(
    engine: Engine, receiver: Receiver, secret: None
) -> None:
    webhook = hook(url=receiver.url)
    alerting = Alerting([webhook], base_url=BASE_URL + "/")
    deliverer = Deliverer(engine, [webhook], idle_poll=NEVER)
    alerting.on_enqueue = deliverer.notify
    h = Harness(engine, alerting)
    stop = asyncio.Event()
    task = asyncio.create_task(deliverer.run(stop))
    try:
        await asyncio.to_thread(h.succeed, [tool("search"), tool("fetch")])
        assert h.alerts() == []

        revoked = await asyncio.to_thread(h.succeed, [tool("search", read_only=False), tool("fetch")])
        assert [(f.rule, f.severity) for f in revoked.findings] == [("read-only-revoked", Severity.CRITICAL)]
        assert await asyncio.to_thread(receiver.wait_delivered, 1), "the commit wakes the deliverer"
        (alert,) = h.alerts()
        assert (alert.rule, alert.severity, alert.tool, alert.state) == (
            "read-only-revoked",
            "critical",
            "search",
            "open",
        )

        edited = tool("search", read_only=False, description="Search, now with more words.")
        changed = await asyncio.to_thread(h.succeed, [edited, tool("fetch")])
        assert [f.rule for f in changed.findings] == ["description-changed"]
        assert [a.state for a in h.alerts()] == ["open"], "still writable compared with where it started"
        assert len(h.outbox()) == 1

        await asyncio.to_thread(h.succeed, [{**edited, "annotations": {"readOnlyHint": True}}, tool("fetch")])
        assert await asyncio.to_thread(receiver.wait_delivered, 2)
    finally:
        stop.set()
        await task

    assert [a.rule for a in h.alerts()] == ["read-only-revoked"], (
        "flipping back is the fix, not read-only-claimed"
    )
    (alert,) = h.alerts()
    assert (alert.state, alert.open_key) == ("resolved", None) and alert.resolved_at is not None
    assert len(receiver.delivered) == 2 and set(receiver.delivered.values()) == {1}
    assert all(request.verified for request in receiver.requests)
    opened, resolved = (json.loads(request.body) for request in receiver.requests)
    assert opened["type"] == "alert.opened" and resolved["type"] == "alert.resolved"
    assert opened["alert"] == {
        "id": alert.id,
        "key": opened["alert"]["key"],
        "rule": "read-only-revoked",
        "severity": "critical",
        "state": "open",
        "server": "docs",
        "tool": "search",
        "session_id": None,
        "message": opened["findings"][0]["message"],
        "opened_at": alert.opened_at.isoformat().replace("+00:00", "Z"),
        "resolved_at": None,
        "url": f"{BASE_URL}/alerts/{alert.id}",
    }
    installation, _, number = opened["alert"]["key"].partition(":")
    assert len(installation) == 36 and number == str(alert.id), "the id, scoped by the installation"
    (finding,) = opened["findings"]
    assert {k: finding[k] for k in ("rule", "severity", "tool", "field", "old", "new")} == {
        "rule": "read-only-revoked",
        "severity": "critical",
        "tool": "search",
        "field": "annotations.readOnlyHint",
        "old": True,
        "new": False,
    }
    assert resolved["alert"]["state"] == "resolved" and resolved["alert"]["resolved_at"].endswith("Z")


def test_a_repeat_of_the_rule_on_the_tool_attaches_without_a_second_webhook(engine: Engine) -> None:
    h = Harness(engine, Alerting([hook()], base_url=BASE_URL))
    h.succeed([tool("search")])
    h.succeed([tool("search", description="The search tool.\u200b")])
    (alert,) = h.alerts()
    first_seen = alert.last_seen_at

    again = h.succeed([tool("search", description="The search tool.\u200b", title="Search\u202e")])
    assert [f.rule for f in again.findings if f.rule == "hidden-text-in-description"] == [
        "hidden-text-in-description"
    ]
    (alert,) = h.alerts()
    assert alert.state == "open" and alert.last_seen_at > first_seen
    assert h.finding_count(alert.id) == 2
    assert [(name, event) for name, event, _ in h.outbox()] == [("ops", "alert.opened")]


def test_a_tool_that_disappears_resolves_its_alert(engine: Engine) -> None:
    h = Harness(engine, Alerting([hook()], base_url=BASE_URL))
    h.succeed([tool("search"), tool("fetch")])
    h.succeed([tool("search", read_only=False), tool("fetch")])
    h.succeed([tool("fetch")])
    (alert,) = h.alerts()
    assert alert.state == "resolved"
    assert [event for _, event, _ in h.outbox()] == ["alert.opened", "alert.resolved"]


def test_server_unreachable_opens_after_n_failures_and_resolves_on_success(engine: Engine) -> None:
    h = Harness(engine, Alerting([hook()], base_url=BASE_URL), unreachable_after=3)
    h.succeed([tool("search")])
    h.fail()
    h.fail()
    assert h.alerts() == []
    h.fail()
    h.fail()
    (alert,) = h.alerts()
    assert (alert.rule, alert.severity, alert.tool, alert.state) == (
        "server-unreachable",
        "high",
        None,
        "open",
    )
    assert len(h.outbox()) == 1

    h.succeed([tool("search")])  # the same listing: no new version, still a success
    (alert,) = h.alerts()
    assert alert.state == "resolved"
    assert [event for _, event, _ in h.outbox()] == ["alert.opened", "alert.resolved"]


def test_acknowledge(engine: Engine) -> None:
    h = Harness(engine, Alerting([hook()], base_url=BASE_URL))
    h.succeed([tool("search")])
    h.succeed([tool("search", read_only=False)])
    (alert,) = h.alerts()
    at = datetime.now(UTC)
    with h.store.sessions.begin() as session:
        acked = acknowledge(session, alert.id, at, by="dana")
        assert acked is not None and acked.state == "acknowledged" and acked.acknowledged_at == at
        assert acknowledge(session, alert.id, at + timedelta(hours=1), by="sam") is acked
        assert acked.acknowledged_at == at, "acknowledging twice keeps the first time"
        assert acked.acknowledged_by == "dana", "and who took it first"
        assert acknowledge(session, alert.id + 1000, at, by="dana") is None

    h.succeed([tool("search")])  # the condition clears: acknowledged -> resolved
    with h.store.sessions.begin() as session, pytest.raises(AlertResolved, match="nothing to acknowledge"):
        acknowledge(session, alert.id, datetime.now(UTC), by="dana")
    assert [event for _, event, _ in h.outbox()] == ["alert.opened", "alert.resolved"]


def test_thresholds_and_which_webhooks_hear(engine: Engine) -> None:
    assert Alerting(base_url=BASE_URL).min_severity == Severity.HIGH
    assert Alerting([hook("a", "critical"), hook("b", "low")], base_url=BASE_URL).min_severity == Severity.LOW
    config = Config(monitor=MonitorSettings(), webhooks=[hook("a", "critical")])
    assert Alerting.from_config(config).min_severity == Severity.HIGH
    config = Config(monitor=MonitorSettings(alert_min_severity="low"), webhooks=[hook("a", "medium")])
    assert Alerting.from_config(config).min_severity == Severity.LOW

    h = Harness(engine, Alerting([hook("ops", "high"), hook("pager", "critical")], base_url=BASE_URL))
    h.succeed([tool("search"), tool("fetch")])
    required = {"type": "object", "required": ["q"]}
    h.succeed([tool("search", inputSchema=required), tool("fetch")])
    assert h.alerts() == [], "required-argument-added is medium, below every webhook"
    h.succeed([tool("search", inputSchema=required, description="Hidden\u200b."), tool("fetch")])
    h.succeed(
        [tool("search", inputSchema=required, description="Hidden\u200b."), tool("fetch", read_only=False)]
    )
    assert [(a.rule, a.severity) for a in h.alerts()] == [
        ("hidden-text-in-description", "high"),
        ("read-only-revoked", "critical"),
    ]
    assert [
        name for name, _, body in h.outbox() if body["alert"]["rule"] == "hidden-text-in-description"
    ] == ["ops"]
    assert sorted(name for name, _, body in h.outbox() if body["alert"]["rule"] == "read-only-revoked") == [
        "ops",
        "pager",
    ]


def test_a_worse_finding_raises_the_severity_and_tells_only_newly_concerned_webhooks(engine: Engine) -> None:
    alerting = Alerting([hook("ops", "high"), hook("pager", "critical")], base_url=BASE_URL)
    h = Harness(engine, alerting)

    def stale(session: Session, session_id: str, severity: Severity, message: str) -> Alert:
        server = session.get_one(Server, h.server_id)
        return open_or_attach(
            session,
            server,
            rule="session-stale",
            severity=severity,
            session_id=session_id,
            message=message,
            now=h.clock.tick(),
            policy=alerting,
        )

    with h.store.sessions.begin() as session:
        first = stale(session, "s1", Severity.HIGH, "missed a high change")
        assert stale(session, "s1", Severity.CRITICAL, "missed a critical change") is first
        assert (first.severity, first.message) == ("critical", "missed a critical change")
        assert stale(session, "s1", Severity.HIGH, "missed another high change") is first
        assert first.severity == "critical", "severity only goes up"
        assert stale(session, "s2", Severity.HIGH, "another session").id != first.id
    assert [(name, event) for name, event, _ in h.outbox()] == [
        ("ops", "alert.opened"),
        ("pager", "alert.opened"),
        ("ops", "alert.opened"),
    ]
    assert h.outbox()[1][2]["alert"]["severity"] == "critical"

    with h.store.sessions.begin() as session:
        now = h.clock.tick()
        resolved = resolve_matching(
            session, h.server_id, "session-stale", session_id="s1", now=now, policy=alerting
        )
        assert resolved is not None and resolved.state == "resolved"
        again = resolve_matching(
            session, h.server_id, "session-stale", session_id="s1", now=now, policy=alerting
        )
        assert again is None, "nothing open under that key any more"
        reopened = stale(session, "s1", Severity.HIGH, "stale again")
        assert reopened.id != resolved.id, "a resolved alert is history; a recurrence is a new alert"
    events = [(name, event) for name, event, _ in h.outbox()]
    assert events[3:] == [("ops", "alert.resolved"), ("pager", "alert.resolved"), ("ops", "alert.opened")]


def test_alerts_commit_with_the_poll_or_not_at_all(engine: Engine) -> None:
    class Explodes:
        def after_poll(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("power cut")

    h = Harness(engine, Alerting([hook()], base_url=BASE_URL))
    h.succeed([tool("search")])
    h.store.hooks.append(Explodes())
    with pytest.raises(RuntimeError, match="power cut"):
        h.succeed([tool("search", read_only=False)])
    assert h.alerts() == [] and h.outbox() == []
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Snapshot)) == 1
        assert session.scalar(select(func.count()).select_from(FindingRecord)) == 0


def test_concurrent_opens_of_one_key_make_one_alert(engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite has one writer at a time")
    alerting = Alerting(base_url=BASE_URL)
    h = Harness(engine, alerting)
    kwargs: dict[str, Any] = dict(rule="session-stale", severity=Severity.HIGH, session_id="s", message="m")
    results: list[int] = []

    def second() -> None:
        with h.store.sessions.begin() as session:
            server = session.get_one(Server, h.server_id)
            results.append(open_or_attach(session, server, now=h.clock.now, policy=alerting, **kwargs).id)

    with h.store.sessions() as first:
        with first.begin():
            server = first.get_one(Server, h.server_id)
            opened = open_or_attach(first, server, now=h.clock.tick(), policy=alerting, **kwargs)
            thread = threading.Thread(target=second)
            thread.start()
            assert wait_for_lock_wait(engine), "the second insert waits on the first's uncommitted key"
        thread.join(10)
    assert not thread.is_alive()
    assert results == [opened.id]
    assert [a.id for a in h.alerts()] == [opened.id]


def wait_for_lock_wait(engine: Engine, timeout: float = 10.0) -> bool:
    """PostgreSQL shows a blocked statement only in pg_locks, with no event to await: poll it, bounded."""
    deadline = time.monotonic() + timeout
    with engine.connect() as connection:
        while time.monotonic() < deadline:
            if connection.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")):
                return True
            connection.rollback()
            time.sleep(0.01)
    return False
