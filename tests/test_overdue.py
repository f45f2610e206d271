"""No data is not "ok" (docs/contract.md section 13): a server whose newest poll attempt is more than
three intervals old is `overdue` on the overview (counted apart from ok), its page, the API and
/metrics, whatever instance registered it."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families
from support.web import TOKEN_ENV, web_client
from support.world import populate

from monitor.config import Config, MonitorSettings
from monitor.store import Store


def config(poll_interval: float) -> Config:
    return Config(
        monitor=MonitorSettings(api_token_env=TOKEN_ENV, poll_interval=poll_interval), source="test"
    )


def test_a_server_nobody_polls_is_overdue_not_ok(store: Store) -> None:
    """`search` was last polled 90 minutes before the app's clock: fine on an hourly interval, three
    intervals late on a 60 s one (an instance with another config registered it)."""
    populate(store)
    with web_client(store, config(3600)) as hourly:
        assert hourly.get("/api/v1/servers/search").json()["status"] == "ok"
    with web_client(store, config(60)) as client:
        search = client.get("/api/v1/servers/search").json()
        assert (search["status"], search["overdue"]) == ("overdue", True)
        listed = {s["name"]: s for s in client.get("/api/v1/servers").json()["items"]}
        assert listed["search"]["status"] == "overdue"
        assert listed["files"]["overdue"] is True and listed["files"]["status"] == "failing"

        overview = client.get("/", headers={"Accept": "text/html"})
        assert overview.status_code == 200
        assert '<dt>Overdue</dt><dd><a href="/?status=overdue"' in overview.text, "counted apart from ok"
        assert '<span class="status status-failing">overdue</span>' in overview.text
        only = client.get("/?status=overdue").text
        rows = re.findall(r'<th scope="row"><a href="/servers/([^"]+)">', only)
        assert rows == ["search"], rows
        page = client.get("/servers/search").text
        assert "overdue" in page and "no poll for" in page

        families = text_string_to_metric_families(client.get("/metrics").text)
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    assert samples[("drift_monitor_servers", (("status", "overdue"),))] == 1
    assert samples[("drift_monitor_servers", (("status", "ok"),))] == 0
    assert samples[("drift_monitor_server_poll_interval_seconds", (("server", "search"),))] == 60
