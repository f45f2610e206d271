"""`drift-monitor serve` end to end: real servers, a real webhook receiver, real processes."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import http_server, server_command
from receiver import Receiver

from monitor.core.fingerprint import fingerprint

KEY = b"service test key"
SECRET_ENV = "TEST_SERVICE_WEBHOOK_SECRET"
TOKEN = "service-test-token-0123456789"


def tools(read_only: bool) -> list[dict[str, Any]]:
    return [
        {
            "name": "purge_tenant",
            "description": "Remove a tenant's records.",
            "inputSchema": {"type": "object", "properties": {"tenant": {"type": "string"}}},
            "annotations": {"readOnlyHint": read_only},
        },
        {"name": "lookup", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    ]


class Service:
    """A `drift-monitor serve` subprocess; its output is drained by a thread so it never blocks."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "serve", "--config", str(config), "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        ready: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line)
                if line.startswith("READY "):
                    ready.put(line.split()[1])
            ready.put(None)

        threading.Thread(target=pump, daemon=True).start()
        url = ready.get(timeout=60)
        if url is None:
            raise RuntimeError("serve exited before it was ready:\n" + "".join(self.lines[-30:]))
        self.url = url

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def output(self) -> str:
        return "".join(self.lines)


@contextmanager
def service(config: Path, env: dict[str, str]) -> Iterator[Service]:
    running = Service(config, env)
    try:
        yield running
    finally:
        running.stop()


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
    return {
        **os.environ,
        SECRET_ENV: "whsec_" + __import__("base64").b64encode(KEY).decode(),
        "TEST_SERVICE_TOKEN": TOKEN,
    }


def migrate(config: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "migrate", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def events(receiver: Receiver) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for request in receiver.requests:
        if request.status is not None and 200 <= request.status < 300 and request.id:
            assert request.verified, "every delivery is signed"
            seen.setdefault(request.id, json.loads(request.body))
    return list(seen.values())


def wait_event(receiver: Receiver, predicate: Any, timeout: float = 20.0) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def check(_: Receiver) -> bool:
        found[:] = [event for event in events(receiver) if predicate(event)]
        return bool(found)

    assert receiver.wait_for(check, timeout=timeout), (
        f"no matching webhook within {timeout} s: {events(receiver)}"
    )
    return found[0]


@pytest.mark.parametrize("mode", ["notify", "off"])
def test_read_only_flip_is_one_signed_alert_then_resolved(
    tmp_path: Path, database_url: str, mode: str
) -> None:
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
            # With notifications, a 30 s interval: only a notification explains a change seen in 2 s.
            f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n'
            f'interval = "{"30s" if mode == "notify" else "2s"}"\n',
            receiver.url,
        )
        migrate(config, env)
        with service(config, env) as running:
            api = httpx.Client(base_url=running.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
            deadline = time.monotonic() + 40
            while not (server := api.get("/api/v1/servers/tenants").json()).get("current") or (
                mode == "notify" and not server.get("watching_since")
            ):
                assert time.monotonic() < deadline, running.output()
                time.sleep(0.1)
            changed_at = time.monotonic()
            tools_file.write_text(json.dumps(tools(read_only=False)))
            opened = wait_event(receiver, lambda e: e["type"] == "alert.opened")
            latency = time.monotonic() - changed_at
            print(f"change -> signed webhook ({mode}): {latency:.2f} s")
            assert opened["alert"]["rule"] == "read-only-revoked"
            assert opened["alert"]["severity"] == "critical"
            assert [f["rule"] for f in opened["findings"]] == ["read-only-revoked"]
            assert latency < (2.0 if mode == "notify" else 2.0 + 2.0), "goal: 2 s, or one interval + 2 s"

            tools_file.write_text(json.dumps(tools(read_only=True)))
            resolved = wait_event(receiver, lambda e: e["type"] == "alert.resolved")
            assert resolved["alert"]["id"] == opened["alert"]["id"]
            assert len([e for e in events(receiver) if e["type"] == "alert.opened"]) == 1, "no second alert"
            assert running.stop() == 0, running.output()
            # The SDK may log its own stream errors while sessions close; none may come from us.
            assert not re.search(r'File "[^"]*/monitor/', running.output()), running.output()


def test_stale_session_and_silent_change(tmp_path: Path, database_url: str) -> None:
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
        migrate(config, env)
        with service(config, env) as running:
            from monitor.reporter import SessionReporter

            reporter = SessionReporter(running.url, token=TOKEN)
            deadline = time.monotonic() + 20
            while True:  # watched and confirmed before the change, or silence proves nothing
                server = httpx.get(
                    f"{running.url}/api/v1/servers/tenants", headers={"Authorization": f"Bearer {TOKEN}"}
                ).json()
                since = server.get("watching_since")
                if since and server.get("last_success_at") and server["last_success_at"] > since:
                    break  # a poll confirmed the listing while the watch was up
                assert time.monotonic() < deadline, running.output()
                time.sleep(0.1)
            reporter.opened("tenants", "host-1", client="gateway/1", tools=tools(read_only=True))
            tools_file.write_text(json.dumps(tools(read_only=False)))
            silent = wait_event(receiver, lambda e: e["alert"]["rule"] == "listing-changed-silently")
            assert silent["alert"]["severity"] == "high"
            stale = wait_event(receiver, lambda e: e["alert"]["rule"] == "session-stale")
            assert stale["alert"]["severity"] == "critical"
            assert "still treats purge_tenant as read-only" in stale["alert"]["message"]
            reporter.heartbeat("tenants", "host-1", fingerprint=fingerprint(tools(read_only=False)))
            wait_event(
                receiver, lambda e: e["type"] == "alert.resolved" and e["alert"]["rule"] == "session-stale"
            )


def test_delivery_survives_sigkill(tmp_path: Path, database_url: str) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(tools(read_only=True)))
    env = environment()
    receiver = Receiver(KEY).start()
    try:
        receiver.stop()  # the receiver is down: deliveries stay pending in the outbox
        with http_server("fastmcp_server.py", str(tools_file), "--list-changed", "notify") as mcp_url:
            config = write_config(
                tmp_path,
                database_url,
                f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n',
                receiver.url,
            )
            migrate(config, env)
            first = Service(config, env)
            try:
                from sqlalchemy import create_engine, func, select

                from monitor.store.models import WebhookDelivery

                engine = create_engine(database_url)
                deadline = time.monotonic() + 20
                while True:
                    with engine.connect() as connection:
                        snapshots = connection.exec_driver_sql("select count(*) from snapshots").scalar()
                    if snapshots:
                        break
                    assert time.monotonic() < deadline, first.output()
                    time.sleep(0.1)
                tools_file.write_text(json.dumps(tools(read_only=False)))
                deadline = time.monotonic() + 20
                while True:
                    with engine.connect() as connection:
                        attempted = connection.scalar(
                            select(func.count())
                            .select_from(WebhookDelivery)
                            .where(WebhookDelivery.attempts > 0, WebhookDelivery.lease_owner.is_(None))
                        )
                    if attempted:  # enqueued, tried against the dead receiver, still pending
                        break
                    assert time.monotonic() < deadline, first.output()
                    time.sleep(0.1)
                engine.dispose()
            finally:
                first.stop(signal.SIGKILL)
            receiver.start()
            with service(config, env) as second:
                # A kill that lands mid-attempt leaves a lease (60 s) for the new process to wait out.
                opened = wait_event(receiver, lambda e: e["type"] == "alert.opened", timeout=90)
                assert opened["alert"]["rule"] == "read-only-revoked"
                assert second.stop() == 0
            answered = [r.id for r in receiver.requests if r.status is not None and 200 <= r.status < 300]
            assert len(answered) == len(set(answered)) == 1, "delivered exactly once"
    finally:
        receiver.stop()


def test_poll_opens_alerts_and_queues_what_serve_delivers_once(tmp_path: Path, database_url: str) -> None:
    """`drift-monitor poll` (from cron, say) takes the same path from finding to alert as `serve`."""
    from sqlalchemy import create_engine, select

    from monitor.store.models import Alert, WebhookDelivery

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
        migrate(config, env)
        poll = [sys.executable, "-m", "monitor.cli", "poll", "--config", str(config)]
        first = subprocess.run(poll, capture_output=True, text=True, env=env, check=False)
        assert first.returncode == 0, first.stderr
        tools_file.write_text(json.dumps(tools(read_only=False)))
        second = subprocess.run(poll, capture_output=True, text=True, env=env, check=False)
        assert second.returncode == 0, second.stderr
        assert "read-only-revoked" in second.stdout

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

            with service(config, env) as running:
                assert receiver.wait_delivered(1, timeout=60), running.output()
                assert running.stop() == 0
            with engine.connect() as connection:
                states = connection.execute(select(WebhookDelivery.id, WebhookDelivery.state)).all()
        finally:
            engine.dispose()
    assert states == [(queued[0].id, "delivered")]
    assert dict(receiver.delivered) == {queued[0].id: 1}
    body = json.loads(receiver.requests[0].body)
    assert body["type"] == "alert.opened" and body["alert"]["id"] == alerts[0].id
