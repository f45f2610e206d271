"""`drift-monitor serve` end to end: real servers, a real webhook receiver, real processes.

What each test asserts is what the service promises, read from its API, its database and the
webhooks it signs, never how fast it was: a busy machine makes a test slower, not red. (How long a
change takes to become a webhook is a figure of bench/bench_latency.py.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, func, select
from support import (
    WAIT,
    Receiver,
    Service,
    http_server,
    migrate_config,
    read_only_flip,
    server_command,
    serving,
    wait_until,
    webhook_secret,
)

from monitor.core.fingerprint import fingerprint
from monitor.reporter import SessionReporter
from monitor.store.models import FindingRecord, Snapshot, WebhookDelivery

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

KEY = b"service test key"
SECRET_ENV = "TEST_SERVICE_WEBHOOK_SECRET"
TOKEN = "service-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def tools(read_only: bool) -> list[dict[str, Any]]:
    tenant = {"type": "object", "properties": {"tenant": {"type": "string"}}}
    return read_only_flip(read_only, description="Remove a tenant's records.", input_schema=tenant)


def write_config(tmp_path: Path, database_url: str, servers: str, webhook_url: str, **monitor: str) -> Path:
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in monitor.items())
    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "2s"\npoll_timeout = "10s"\n'
        'api_token_env = "TEST_SERVICE_TOKEN"\n'
        f'session_check_interval = "500ms"\nsession_grace = "1s"\n{extra}\n'
        f"{servers}\n"
        f'[[webhooks]]\nname = "ops"\nurl = "{webhook_url}"\nsecret_env = "{SECRET_ENV}"\n'
        'min_severity = "high"\n'
    )
    return config


def environment() -> dict[str, str]:
    return {**os.environ, SECRET_ENV: webhook_secret(KEY), "TEST_SERVICE_TOKEN": TOKEN}


def server_state(service: Service, name: str) -> dict[str, Any]:
    answer = httpx.get(f"{service.url}/api/v1/servers/{name}", headers=AUTH, timeout=30)
    assert answer.status_code == 200, answer.text
    state: dict[str, Any] = answer.json()
    return state


@pytest.mark.parametrize("mode", ["notify", "off"])
@pytest.mark.slow
def test_read_only_flip_is_one_signed_alert_then_resolved(
    tmp_path: Path, database_url: str, mode: str
) -> None:
    """A server's purge_tenant loses readOnlyHint, then gets it back. Must hold: one signed
    `alert.opened` (read-only-revoked, critical), then `alert.resolved` for the same alert, and no
    second alert; serve stops cleanly on SIGTERM, with no traceback of ours in its log. With
    `notify`, the change is seen through the list-changed notification: the interval is an hour,
    so no scheduled poll can explain it, and the server's last notification is after the change."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)))
    env = environment()
    with (
        Receiver(KEY) as receiver,
        http_server("fastmcp_server.py", str(tools_file), "--list-changed", mode) as mcp_url,
    ):
        config = write_config(
            tmp_path,
            database_url,
            f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n'
            f'interval = "{"1h" if mode == "notify" else "2s"}"\n',
            receiver.url,
        )
        migrate_config(config, env)
        with serving(config, env) as running:
            if mode == "notify":  # the first poll now, not at a random point of the hour
                polled = httpx.post(f"{running.url}/api/v1/servers/tenants/poll", headers=AUTH, timeout=30)
                assert polled.status_code == 200 and polled.json()["ok"], polled.text
            wait_until(
                "a first poll" + (" and a watch session" if mode == "notify" else ""),
                lambda: (
                    (state := server_state(running, "tenants")).get("current")
                    and (mode != "notify" or state.get("watching_since"))
                ),
                timeout=WAIT,
                alive=[running],
            )
            changed_at = datetime.now(UTC)
            tools_file.write_text(json.dumps(tools(read_only=False)))
            opened = receiver.wait_event(lambda e: e["type"] == "alert.opened", WAIT)
            assert opened["alert"]["rule"] == "read-only-revoked"
            assert opened["alert"]["severity"] == "critical"
            assert [f["rule"] for f in opened["findings"]] == ["read-only-revoked"]
            notified = server_state(running, "tenants")["last_notification_at"]
            if mode == "notify":
                assert notified and datetime.fromisoformat(notified) >= changed_at, notified
            else:
                assert notified is None

            tools_file.write_text(json.dumps(tools(read_only=True)))
            resolved = receiver.wait_event(lambda e: e["type"] == "alert.resolved", WAIT)
            assert resolved["alert"]["id"] == opened["alert"]["id"]
            opens = [e for e in receiver.events() if e["type"] == "alert.opened"]
            assert len(opens) == 1, "no second alert"
            assert running.stop() == 0, running.output()
            # The SDK may log its own stream errors while sessions close; none may come from us.
            assert not re.search(r'File "[^"]*/monitor/', running.output()), running.output()


@pytest.mark.slow
def test_stale_session_and_silent_change(tmp_path: Path, database_url: str) -> None:
    """A server that advertises listChanged but never notifies changes its listing while a host
    session holds the old one. Must hold: `listing-changed-silently` (high) and `session-stale`
    (critical, naming the tool the host still treats as read-only) are delivered; the host's
    heartbeat with the new fingerprint resolves session-stale."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)))
    env = environment()
    with (
        Receiver(KEY) as receiver,
        http_server("fastmcp_server.py", str(tools_file), "--list-changed", "advertise") as mcp_url,
    ):
        config = write_config(
            tmp_path,
            database_url,
            f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\ninterval = "1s"\n',
            receiver.url,
        )
        migrate_config(config, env)
        with serving(config, env) as running:
            reporter = SessionReporter(running.url, token=TOKEN)

            def confirmed_while_watched() -> bool:
                """Watched and confirmed before the change, or silence proves nothing."""
                state = server_state(running, "tenants")
                since, success = state.get("watching_since"), state.get("last_success_at")
                return bool(since and success and success > since)

            wait_until("a poll while the watch is up", confirmed_while_watched, timeout=WAIT, alive=[running])
            reporter.opened("tenants", "host-1", client="gateway/1", tools=tools(read_only=True))
            tools_file.write_text(json.dumps(tools(read_only=False)))
            silent = receiver.wait_event(lambda e: e["alert"]["rule"] == "listing-changed-silently", WAIT)
            assert silent["alert"]["severity"] == "high"
            stale = receiver.wait_event(lambda e: e["alert"]["rule"] == "session-stale", WAIT)
            assert stale["alert"]["severity"] == "critical"
            assert "still treats purge_tenant as read-only" in stale["alert"]["message"]
            reporter.heartbeat("tenants", "host-1", fingerprint=fingerprint(tools(read_only=False)))
            receiver.wait_event(
                lambda e: e["type"] == "alert.resolved" and e["alert"]["rule"] == "session-stale", WAIT
            )
            silent_alerts = {
                e["alert"]["id"] for e in receiver.events() if e["alert"]["rule"] == silent["alert"]["rule"]
            }
            assert silent_alerts == {silent["alert"]["id"]}, "one change, one silent-change alert"


@pytest.mark.slow
def test_a_stdio_upgrade_is_a_new_deployment_not_a_silent_change(tmp_path: Path, database_url: str) -> None:
    """A stdio server that advertises listChanged and never notifies, its listing fixed when its process
    starts, is upgraded between polls while the watch session is connected. Must hold: the change is
    delivered (read-only-revoked) and no `listing-changed-silently` is raised, then or in later polls:
    the watch session's own process still serves the old listing, so its silence proves nothing."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)))
    command, *args = server_command(
        "fastmcp_server.py", str(tools_file), "--list-changed", "advertise", "--read-once"
    )
    env = environment()
    engine = create_engine(database_url)
    try:
        with Receiver(KEY) as receiver:
            config = write_config(
                tmp_path,
                database_url,
                f'[[servers]]\nname = "tenants"\ntransport = "stdio"\ncommand = {json.dumps(command)}\n'
                f'args = {json.dumps(args)}\ninterval = "1s"\n',
                receiver.url,
            )
            migrate_config(config, env)
            with serving(config, env) as running:

                def confirmed_while_watched() -> bool:
                    state = server_state(running, "tenants")
                    since, success = state.get("watching_since"), state.get("last_success_at")
                    return bool(since and success and success > since)

                wait_until(
                    "a poll while the watch is up", confirmed_while_watched, timeout=WAIT, alive=[running]
                )
                tools_file.write_text(json.dumps(tools(read_only=False)))  # the upgrade
                revoked = receiver.wait_event(lambda e: e["alert"]["rule"] == "read-only-revoked", WAIT)
                seen_at = revoked["alert"]["opened_at"]
                wait_until(
                    "another poll of the upgraded server",
                    lambda: (
                        (server_state(running, "tenants").get("last_success_at") or "") > seen_at
                        and bool(server_state(running, "tenants").get("watching_since"))
                    ),
                    timeout=WAIT,
                    alive=[running],
                )
        with engine.connect() as connection:
            rules = set(connection.scalars(select(FindingRecord.rule)))
        assert "read-only-revoked" in rules and "listing-changed-silently" not in rules
        assert not [e for e in receiver.events() if e["alert"]["rule"] == "listing-changed-silently"]
    finally:
        engine.dispose()


@pytest.mark.slow
def test_delivery_survives_sigkill(tmp_path: Path, database_url: str) -> None:
    """An alert's webhook is tried against a receiver that is down, then serve is SIGKILLed. Must
    hold: a new serve delivers it once the receiver is back, exactly once."""
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)))
    env = environment()
    receiver = Receiver(KEY).start()
    engine = create_engine(database_url)
    try:
        receiver.stop()  # the receiver is down: deliveries stay pending in the outbox
        with http_server("fastmcp_server.py", str(tools_file), "--list-changed", "notify") as mcp_url:
            config = write_config(
                tmp_path,
                database_url,
                f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n',
                receiver.url,
            )
            migrate_config(config, env)
            with serving(config, env) as first:

                def count(sql: Any) -> int:
                    with engine.connect() as connection:
                        return int(connection.scalar(sql) or 0)

                wait_until(
                    "a first snapshot",
                    lambda: count(select(func.count()).select_from(Snapshot)),
                    timeout=WAIT,
                    alive=[first],
                )
                tools_file.write_text(json.dumps(tools(read_only=False)))
                tried = (
                    select(func.count())
                    .select_from(WebhookDelivery)
                    .where(WebhookDelivery.attempts > 0, WebhookDelivery.lease_owner.is_(None))
                )
                # Enqueued, tried against the dead receiver, still pending.
                wait_until("a failed delivery attempt", lambda: count(tried), timeout=WAIT, alive=[first])
                assert first.kill() == -signal.SIGKILL
            receiver.start()
            with serving(config, env) as second:
                # A kill that lands mid-attempt leaves a lease (60 s) for the new process to wait out.
                opened = receiver.wait_event(lambda e: e["type"] == "alert.opened", 60 + WAIT)
                assert opened["alert"]["rule"] == "read-only-revoked"
                assert second.stop() == 0, second.output()
            answered = [r.id for r in receiver.requests if r.status is not None and 200 <= r.status < 300]
            assert len(answered) == len(set(answered)) == 1, "delivered exactly once"
    finally:
        engine.dispose()
        receiver.stop()


@pytest.mark.slow
def test_poll_opens_alerts_and_queues_what_serve_delivers_once(tmp_path: Path, database_url: str) -> None:
    """`drift-monitor poll` (from cron, say) takes the same path from finding to alert as `serve`."""
    from monitor.store.models import Alert

    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)))
    command, *args = server_command("fastmcp_server.py", str(tools_file))
    env = environment()
    with Receiver(KEY) as receiver:
        config = write_config(
            tmp_path,
            database_url,
            f'[[servers]]\nname = "tenants"\ntransport = "stdio"\ncommand = {json.dumps(command)}\n'
            f"args = {json.dumps(args)}\n",
            receiver.url,
        )
        migrate_config(config, env)
        poll = [sys.executable, "-m", "monitor.cli", "poll", "--config", str(config)]
        first = subprocess.run(poll, capture_output=True, text=True, env=env, check=False)
        assert first.returncode == 0, first.stderr
        tools_file.write_text(json.dumps(tools(read_only=False)))
        second = subprocess.run(poll, capture_output=True, text=True, env=env, check=False)
        assert second.returncode == 0, second.stderr
        assert "read-only-revoked" in second.stdout
        assert "open alerts: none" in first.stdout
        assert re.search(
            r"open alerts: 1\n  #\d+ CRITICAL +read-only-revoked +tenants: purge_tenant", second.stdout
        )

        engine = create_engine(database_url)
        try:
            with engine.connect() as connection:
                alerts = connection.execute(select(Alert.id, Alert.rule, Alert.state)).all()
                queued = connection.execute(
                    select(WebhookDelivery.id, WebhookDelivery.alert_id, WebhookDelivery.state)
                ).all()
            assert [(rule, state) for _, rule, state in alerts] == [("read-only-revoked", "open")]
            assert [(alert_id, state) for _, alert_id, state in queued] == [(alerts[0].id, "pending")]
            assert receiver.requests == [], "poll queues; it does not deliver"

            with serving(config, env) as running:
                assert receiver.wait_delivered(1, timeout=WAIT), running.output()
                assert running.stop() == 0
            with engine.connect() as connection:
                states = connection.execute(select(WebhookDelivery.id, WebhookDelivery.state)).all()
        finally:
            engine.dispose()
    assert states == [(queued[0].id, "delivered")]
    assert dict(receiver.delivered) == {queued[0].id: 1}
    body = json.loads(receiver.requests[0].body)
    assert body["type"] == "alert.opened" and body["alert"]["id"] == alerts[0].id
