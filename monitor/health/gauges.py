"""Per-server gauges for /metrics: one series per registered server, so one can alert on one server.

`drift_monitor_server_up` is 1 when the last poll succeeded and 0 when it failed (absent before the
first poll), like Prometheus's own `up`; the version, last poll times and unresolved alerts by
severity follow. Server names are the registered ones (a bounded set, see
`queries.MAX_SERVER_SERIES`).
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from monitor.store.queries import ServerMetrics


def server_gauges(servers: Sequence[ServerMetrics]) -> list[Metric]:
    up = GaugeMetricFamily(
        "drift_monitor_server_up", "1 if the server's last poll succeeded, 0 if it failed.", labels=["server"]
    )
    version = GaugeMetricFamily(
        "drift_monitor_server_version",
        "The server's current listing version (0 before its first successful poll).",
        labels=["server"],
    )
    last_poll = GaugeMetricFamily(
        "drift_monitor_server_last_poll_timestamp_seconds",
        "When the server was last polled.",
        labels=["server"],
    )
    last_success = GaugeMetricFamily(
        "drift_monitor_server_last_success_timestamp_seconds",
        "When a poll of the server last succeeded.",
        labels=["server"],
    )
    interval = GaugeMetricFamily(
        "drift_monitor_server_poll_interval_seconds",
        "How often the server is meant to be polled: with the last poll's timestamp, whether it is "
        "overdue (no poll for three intervals).",
        labels=["server"],
    )
    alerts = GaugeMetricFamily(
        "drift_monitor_server_open_alerts",
        "The server's unresolved (open or acknowledged) alerts by severity.",
        labels=["server", "severity"],
    )
    for server in servers:
        version.add_metric([server.name], server.version)
        interval.add_metric([server.name], server.interval_seconds)
        if server.up is not None:
            up.add_metric([server.name], 1.0 if server.up else 0.0)
        if server.last_poll_at is not None:
            last_poll.add_metric([server.name], server.last_poll_at.timestamp())
        if server.last_success_at is not None:
            last_success.add_metric([server.name], server.last_success_at.timestamp())
        for severity, count in server.open_alerts.items():
            alerts.add_metric([server.name, severity], count)
    return [up, version, last_poll, last_success, interval, alerts]
