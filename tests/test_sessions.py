"""Host sessions: a session holding an older listing than the server's raises session-stale."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from support import read_only_flip, record_poll

from monitor.alerts.page import timeline
from monitor.config import ServerConfig
from monitor.core.findings import Severity
from monitor.core.fingerprint import fingerprint
from monitor.notify.alerts import Alerting
from monitor.sessions.service import (
    SessionError,
    UnknownServer,
    check_sessions,
    close_session,
    heartbeat,
    list_sessions,
    register_session,
)
from monitor.sinks.base import WebhookConfig
from monitor.store import Store, queries
from monitor.store.models import Alert, FindingRecord, HostSession, WebhookDelivery
from monitor.store.registration import sync_servers

T0 = datetime(2026, 1, 1, 14, 0, tzinfo=UTC)
GRACE = timedelta(minutes=5)


def check(store: Store, alerting: Alerting, now: datetime, max_age: timedelta = timedelta(hours=8)) -> None:
    with store.sessions.begin() as session:
        check_sessions(
            session, now=now, grace=GRACE, max_age=max_age, expiry=timedelta(minutes=15), policy=alerting
        )


def open_alerts(store: Store) -> list[Alert]:
    with store.sessions() as session:
        return list(session.scalars(select(Alert).where(Alert.state != "resolved").order_by(Alert.id)))


@pytest.fixture
def setup(store: Store) -> tuple[Store, Alerting, int]:
    # Low: session-long-lived (low) opens alerts only where the policy asks for low severities.
    alerting = Alerting(base_url="http://127.0.0.1:8000", min_severity=Severity.LOW)
    server_id = sync_servers(
        store, [ServerConfig(name="git", transport="http", url="http://127.0.0.1:9/")], T0
    )["git"]
    return store, alerting, server_id


def test_stale_session_raises_the_worst_missed_change_and_resolves_on_catch_up(
    setup: tuple[Store, Alerting, int],
) -> None:
    store, alerting, server_id = setup
    record_poll(store, server_id, read_only_flip(True), T0)
    with store.sessions.begin() as session:
        register_session(
            session,
            server="git",
            session_id="s-1",
            client="gateway",
            connected_at=T0,
            fingerprint=None,
            tools=read_only_flip(True),
            now=T0,
        )
    record_poll(store, server_id, read_only_flip(False), T0 + timedelta(minutes=1))

    check(store, alerting, T0 + timedelta(minutes=3))
    assert [a.rule for a in open_alerts(store)] == [], "within the grace period"
    with store.sessions() as session:
        (view,) = list_sessions(session, stale_only=False, now=T0 + timedelta(minutes=3), grace=GRACE)
        assert not view.stale

    check(store, alerting, T0 + timedelta(minutes=7))
    check(store, alerting, T0 + timedelta(minutes=8))  # no storm
    (alert,) = open_alerts(store)
    assert (alert.rule, alert.severity, alert.session_id) == ("session-stale", "critical", "s-1")
    assert "still treats purge_tenant as read-only" in alert.message
    with store.sessions() as session:
        (view,) = list_sessions(session, stale_only=True, now=T0 + timedelta(minutes=8), grace=GRACE)
        assert view.stale and view.session_id == "s-1"

    with store.sessions.begin() as session:
        heartbeat(
            session,
            server="git",
            session_id="s-1",
            fingerprint=fingerprint(read_only_flip(False)),
            tools=None,
            now=T0 + timedelta(minutes=9),
        )
    check(store, alerting, T0 + timedelta(minutes=10))
    assert [a.rule for a in open_alerts(store)] == ["session-stale"], "clear for less than a full check"
    check(store, alerting, T0 + timedelta(minutes=10, seconds=15))
    assert open_alerts(store) == []


def test_unknown_listing_long_lived_close_and_expiry(setup: tuple[Store, Alerting, int]) -> None:
    store, alerting, server_id = setup
    record_poll(store, server_id, read_only_flip(True), T0)
    with store.sessions.begin() as session:
        register_session(
            session,
            server="git",
            session_id="old",
            client=None,
            connected_at=T0 - timedelta(hours=9),
            fingerprint="0" * 64,
            tools=None,
            now=T0,
        )
    check(store, alerting, T0 + timedelta(minutes=6))
    rules = {(a.rule, a.severity) for a in open_alerts(store)}
    assert rules == {("session-stale", "high"), ("session-long-lived", "low")}
    assert "never saw" in next(a.message for a in open_alerts(store) if a.rule == "session-stale")
    with store.sessions.begin() as session:
        assert close_session(
            session, server="git", session_id="old", now=T0 + timedelta(minutes=7), policy=alerting
        )
    assert open_alerts(store) == []

    with store.sessions.begin() as session:
        register_session(
            session,
            server="git",
            session_id="quiet",
            client=None,
            connected_at=T0,
            fingerprint=fingerprint(read_only_flip(True)),
            tools=None,
            now=T0,
        )
    check(store, alerting, T0 + timedelta(minutes=20))
    with store.sessions() as session:
        assert session.scalars(select(HostSession)).all() == [], "silent sessions expire"


def test_bad_reports(setup: tuple[Store, Alerting, int]) -> None:
    store, _, _ = setup
    with store.sessions.begin() as session:
        with pytest.raises(UnknownServer):
            register_session(
                session,
                server="nope",
                session_id="x",
                client=None,
                connected_at=T0,
                fingerprint="0" * 64,
                tools=None,
                now=T0,
            )
        with pytest.raises(SessionError, match="fingerprint or the tools"):
            register_session(
                session,
                server="git",
                session_id="x",
                client=None,
                connected_at=T0,
                fingerprint=None,
                tools=None,
                now=T0,
            )
        with pytest.raises(SessionError, match="64 lowercase hex"):
            register_session(
                session,
                server="git",
                session_id="x",
                client=None,
                connected_at=T0,
                fingerprint="ABC",
                tools=None,
                now=T0,
            )
        with pytest.raises(SessionError, match="duplicate tool name"):
            register_session(
                session,
                server="git",
                session_id="x",
                client=None,
                connected_at=T0,
                fingerprint=None,
                tools=[{"name": "a"}, {"name": "a"}],
                now=T0,
            )


def webhook_events(store: Store) -> list[tuple[str, str]]:
    with store.sessions() as session:
        rows = session.execute(
            select(WebhookDelivery.event_type, Alert.rule)
            .join(Alert, Alert.id == WebhookDelivery.alert_id)
            .order_by(WebhookDelivery.created_at)
        ).all()
    return [(event, rule) for event, rule in rows]


@pytest.fixture
def alerted(store: Store, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, Alerting, int]:
    """A webhook that hears high and worse, so the outbox shows every alert.opened and alert.resolved."""
    monkeypatch.setenv("TEST_SESSION_WEBHOOK_SECRET", "whsec_" + "A" * 32)
    webhook = WebhookConfig(
        name="ops",
        url="http://127.0.0.1:9/hook",
        secret_env="TEST_SESSION_WEBHOOK_SECRET",
        min_severity=Severity.HIGH,
    )
    alerting = Alerting([webhook], base_url="http://127.0.0.1:8000", clear_for=timedelta(seconds=15))
    server_id = sync_servers(
        store, [ServerConfig(name="git", transport="http", url="http://127.0.0.1:9/")], T0
    )["git"]
    record_poll(store, server_id, read_only_flip(True), T0)
    with store.sessions.begin() as session:
        register_session(
            session,
            server="git",
            session_id="s-1",
            client="gateway",
            connected_at=T0,
            fingerprint=None,
            tools=read_only_flip(True),
            now=T0,
        )
    record_poll(store, server_id, read_only_flip(False), T0 + timedelta(minutes=1))
    return store, alerting, server_id


def test_a_stale_session_left_alone_is_one_alert_however_often_it_is_checked(
    alerted: tuple[Store, Alerting, int],
) -> None:
    """Ten minutes of checks every 15 s past the grace period, no heartbeat: one alert.opened, no
    alert.resolved, and one stored finding."""
    store, alerting, _ = alerted
    start = T0 + timedelta(minutes=7)
    for tick in range(41):
        check(store, alerting, start + timedelta(seconds=15 * tick))
    assert webhook_events(store) == [("alert.opened", "session-stale")]
    (alert,) = open_alerts(store)
    with store.sessions() as session:
        findings = session.scalars(select(FindingRecord).where(FindingRecord.rule == "session-stale")).all()
    assert len(findings) == 1 and alert.state == "open"


def test_a_condition_that_clears_for_less_than_a_full_check_keeps_its_alert(
    alerted: tuple[Store, Alerting, int],
) -> None:
    """Stale, caught up for one check, stale again: still the first alert, no resolved webhook between."""
    store, alerting, _ = alerted
    check(store, alerting, T0 + timedelta(minutes=7))
    (first,) = open_alerts(store)
    with store.sessions.begin() as session:
        heartbeat(
            session,
            server="git",
            session_id="s-1",
            fingerprint=fingerprint(read_only_flip(False)),
            tools=None,
            now=T0 + timedelta(minutes=7, seconds=5),
        )
    check(store, alerting, T0 + timedelta(minutes=7, seconds=15))  # clear: noted, not resolved
    with store.sessions.begin() as session:
        host = session.scalars(select(HostSession)).one()
        # The report was wrong (a reporter racing its own refresh): it held the old listing all along.
        host.fingerprint, host.fingerprint_since = fingerprint(read_only_flip(True)), T0
    check(store, alerting, T0 + timedelta(minutes=7, seconds=30))
    (again,) = open_alerts(store)
    assert again.id == first.id and again.clear_since is None
    assert webhook_events(store) == [("alert.opened", "session-stale")]


def test_a_condition_below_the_alert_threshold_is_stored_once_not_at_every_check(store: Store) -> None:
    """session-long-lived is low; with the default threshold (high) it opens no alert, and its finding
    is stored once, not once per check."""
    alerting = Alerting(base_url="http://127.0.0.1:8000")
    server_id = sync_servers(
        store, [ServerConfig(name="git", transport="http", url="http://127.0.0.1:9/")], T0
    )["git"]
    record_poll(store, server_id, read_only_flip(True), T0)
    with store.sessions.begin() as session:
        register_session(
            session,
            server="git",
            session_id="old",
            client=None,
            connected_at=T0 - timedelta(hours=9),
            fingerprint=fingerprint(read_only_flip(True)),
            tools=None,
            now=T0,
        )
    for tick in range(10):
        check(store, alerting, T0 + timedelta(seconds=15 * tick))
    with store.sessions() as session:
        rules = session.scalars(select(FindingRecord.rule)).all()
    assert rules == ["session-long-lived"] and open_alerts(store) == []


def test_a_session_behind_is_one_alert_whose_severity_follows_the_worst_it_missed(
    alerted: tuple[Store, Alerting, int],
) -> None:
    """v1 (read-only) held; v2 revokes read-only (critical); v3 gives it back with a new description
    (what the host missed is now low); v4 revokes it again. One alert all along, lowered and raised
    in place with a timeline entry each, never resolved, and "stale since" stays when v2 came."""
    store, alerting, server_id = alerted
    stale_since = T0 + timedelta(minutes=1)  # v2, the first listing the host did not get

    def since(now: datetime) -> datetime | None:
        with store.sessions() as session:
            (view,) = list_sessions(session, stale_only=False, now=now, grace=GRACE)
        return view.stale_since

    def check_alive(now: datetime) -> None:
        """A heartbeat (still holding v1), then the check."""
        with store.sessions.begin() as session:
            heartbeat(session, server="git", session_id="s-1", fingerprint=None, tools=None, now=now)
        check(store, alerting, now)

    check(store, alerting, T0 + timedelta(minutes=7))
    (first,) = open_alerts(store)
    assert first.severity == "critical"

    record_poll(store, server_id, read_only_flip(True, description="Purges."), T0 + timedelta(minutes=10))
    for minute in (11, 12, 13, 20):
        check_alive(T0 + timedelta(minutes=minute))
        (alert,) = open_alerts(store)
        assert alert.id == first.id, f"one alert while the session is behind (minute {minute})"
    assert alert.severity == "low" and "description-changed" in alert.message
    assert since(T0 + timedelta(minutes=20)) == stale_since

    record_poll(store, server_id, read_only_flip(False, description="Purges."), T0 + timedelta(minutes=21))
    check_alive(T0 + timedelta(minutes=22))
    (alert,) = open_alerts(store)
    assert (alert.id, alert.severity) == (first.id, "critical")
    assert "still treats purge_tenant as read-only" in alert.message
    assert since(T0 + timedelta(minutes=22)) == stale_since
    assert webhook_events(store) == [("alert.opened", "session-stale")], "the receiver has it open already"

    with store.sessions() as session:
        detail = queries.alert_detail(session, first.id)
        assert detail is not None
        steps = [moment.what for moment in timeline(detail)]
    assert steps.index("severity lowered from critical to low") < steps.index(
        "severity raised from low to critical"
    ), steps
    assert not any(step.startswith("resolved") for step in steps)
