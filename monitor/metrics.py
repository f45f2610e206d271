"""This process's counters and histograms, as Prometheus expects them.

Counters and histograms count what happened in this process since it started, in memory, so they
only go up (a restart starts them again at zero, which Prometheus reads as a reset, as it should).
They were once derived from table rows, and `prune`, which deletes old rows, made them fall.
Several `serve` instances each expose their own: `sum()` them in queries. What is a state rather
than an event (servers, versions, open alerts) is a gauge read from the database at scrape time
(`monitor.health.api`).

`serve`'s decision processes (`monitor.service.decisions`) send theirs to the main process, whose
`/metrics` gives every process's together (`merged`): one scrape target, whatever the process count.

Label sets are bounded: outcomes, severities, alert events, and webhook names from the config file;
no server names here (those are on the per-server gauges, one series per registered server).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from importlib import metadata

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.samples import Sample

from monitor.core.findings import Severity

REGISTRY = CollectorRegistry(auto_describe=True)
"""This process's metrics; `/metrics` serves them next to the database's gauges."""

POLL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

POLLS = Counter(
    "drift_monitor_polls", "Polls finished by this process, by outcome.", ["outcome"], registry=REGISTRY
)
POLL_DURATION = Histogram(
    "drift_monitor_poll_duration_seconds",
    "Time from connecting to a server to its last tools/list page (or the failure), polls of this process.",
    ["outcome"],
    buckets=POLL_BUCKETS,
    registry=REGISTRY,
)
NEW_VERSIONS = Counter(
    "drift_monitor_new_versions",
    "New listing versions recorded by this process, by the worst severity among their findings.",
    ["worst_severity"],
    registry=REGISTRY,
)
ALERT_EVENTS = Counter(
    "drift_monitor_alert_events",
    "Alert events of this process (opened, acknowledged, resolved; raised, lowered), by severity.",
    ["event", "severity"],
    registry=REGISTRY,
)
DELIVERIES = Counter(
    "drift_monitor_webhook_deliveries",
    "Delivery attempts made by this process, by webhook and outcome (delivered, failed, expired).",
    ["webhook", "outcome"],
    registry=REGISTRY,
)
DECISION_DURATION = Histogram(
    "drift_monitor_decision_duration_seconds",
    "Time this process took to reach a decision (allow, ask or deny), from request to verdict.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    registry=REGISTRY,
)
BUILD_INFO = Gauge(
    "drift_monitor_build_info",
    "Always 1; the labels say which drift-monitor and Python this process runs.",
    ["version", "python"],
    registry=REGISTRY,
)


def _version() -> str:
    try:
        return metadata.version("drift-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"


BUILD_INFO.labels(_version(), platform.python_version()).set(1)
for _outcome in ("ok", "failed"):  # every series exists from the start, at 0: rate() needs a first sample
    POLLS.labels(_outcome)
for _severity in [*Severity, "none"]:
    NEW_VERSIONS.labels(str(_severity))
for _event in ("opened", "acknowledged", "resolved"):
    for _severity in Severity:
        ALERT_EVENTS.labels(_event, str(_severity))


def merged(families: Iterable[Metric]) -> list[Metric]:
    """The metric families of several processes as one process's: a counter's or a histogram's
    series summed (its `_created` the earliest), a gauge's as the first process with it gives it.
    Families keep the order they first appear in."""
    combined: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for family in families:
        if family.name not in combined:
            combined[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            values[family.name] = {}
        series = values[family.name]
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if key not in series:
                series[key] = sample.value
            elif sample.name.endswith("_created"):
                series[key] = min(series[key], sample.value)
            elif family.type != "gauge":
                series[key] += sample.value
    for name, family in combined.items():
        family.samples = [
            Sample(sample, dict(labels), value) for (sample, labels), value in values[name].items()
        ]
    return list(combined.values())
