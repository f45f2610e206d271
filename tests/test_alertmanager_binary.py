"""The Alertmanager sink against the real Alertmanager (Debian's `prometheus-alertmanager`, with
`amtool`), on loopback: an outage while an alert resolves leaves it resolved there, and static labels
arrive. Skipped, saying so, where the binaries are not installed (`.ci/run` installs them)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import support
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from monitor.config import ServerConfig
from monitor.notify.alerts import Alerting
from monitor.notify.delivery import Deliverer
from monitor.notify.repost import repost_open_alerts
from monitor.sinks.alertmanager import AlertmanagerWebhookConfig
from monitor.store import Store
from monitor.store.models import WebhookDelivery
from monitor.store.registration import sync_servers

ALERTMANAGER = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
AMTOOL = shutil.which("amtool")
pytestmark = [
    pytest.mark.skipif(
        ALERTMANAGER is None or AMTOOL is None,
        reason="Alertmanager and amtool are not installed (Debian: prometheus-alertmanager)",
    ),
    pytest.mark.usefixtures("no_leaked_processes"),
    pytest.mark.slow,
]
CONFIG = """route:
  receiver: nobody
  group_wait: 1h
receivers:
  - name: nobody
"""


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager on loopback, without clustering; its base URL."""
    assert ALERTMANAGER is not None
    (tmp_path / "alertmanager.yml").write_text(CONFIG, encoding="utf-8")
    port = support.free_port()
    argv = [
        ALERTMANAGER,
        f"--config.file={tmp_path / 'alertmanager.yml'}",
        f"--storage.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with support.Process(argv) as process:
        for _ in range(100):  # bounded: its start-up is a handful of lines
            if 'msg="Listening on"' in process.wait_for("ts="):
                break
        yield f"http://127.0.0.1:{port}"


def amtool(url: str, *args: str) -> Any:
    assert AMTOOL is not None
    result = subprocess.run(
        [AMTOOL, f"--alertmanager.url={url}", *args, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=support.WAIT,
        check=True,
    )
    return json.loads(result.stdout)


async def test_an_outage_during_a_resolve_leaves_the_alert_resolved_in_alertmanager(
    engine: Engine, alertmanager: str
) -> None:
    webhook = AlertmanagerWebhookConfig(name="am", url=f"{alertmanager}/api/v2/alerts", labels={"env": "ci"})
    alerting = Alerting([webhook], base_url="http://127.0.0.1:8000")
    store = Store(engine, hooks=[alerting])
    clock = [datetime.now(UTC) - timedelta(minutes=5)]

    def tick() -> datetime:
        clock[0] += timedelta(seconds=1)
        return clock[0]

    docs = ServerConfig(name="docs", transport="http", url="http://127.0.0.1:9/")
    (server_id,) = sync_servers(store, [docs], tick()).values()
    # one at a time, in the outbox's order: what reaches Alertmanager last is what the outbox chose
    up = Deliverer(engine, [webhook], backoff_base=0.01, backoff_cap=0.05, concurrency=1)
    down = Deliverer(engine, [webhook.model_copy(update={"url": support.refused_url()})], backoff_base=0.01)

    def poll(read_only: bool) -> None:
        support.record_poll(store, server_id, support.read_only_flip(read_only), tick())

    async def drain() -> None:
        for _ in range(100):
            if not await up.deliver_due():
                return

    poll(read_only=True)
    poll(read_only=False)
    await drain()
    (firing,) = amtool(alertmanager, "alert", "query")
    assert firing["labels"]["alertname"] == "read-only-revoked" and firing["labels"]["env"] == "ci"

    with Session(engine) as session, session.begin():
        assert repost_open_alerts(session, alerting, datetime.now(UTC)) == 1
    await down.deliver_due()  # Alertmanager unreachable: the re-post waits for its retry
    poll(read_only=True)  # and the alert resolves meanwhile
    await drain()

    assert amtool(alertmanager, "alert", "query") == [], "no alert firing again after its resolution"
    api = await asyncio.to_thread(httpx.get, f"{alertmanager}/api/v2/alerts", timeout=support.WAIT)
    assert api.json() == [], "nor in its API"
    with Session(engine) as session:
        states = dict(session.execute(select(WebhookDelivery.event_type, WebhookDelivery.state)).all())
    assert states == {
        "alert.opened": "delivered",
        "alerts.firing": "superseded",
        "alert.resolved": "delivered",
    }
