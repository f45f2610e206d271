"""Metrics as Prometheus expects them: in-process counters that `prune` cannot lower, cumulative
histograms, per-server gauges; and the log lines operators read."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from support import record_poll, refused_url, tool
from support.web import web_client

from monitor.collect.observe import observe_poll
from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.findings import Finding, Severity
from monitor.store import PollOutcome, Store
from monitor.store.models import PollAttempt
from monitor.store.registration import sync_servers
from monitor.store.retention import prune_poll_attempts

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: TestClient, **headers: str) -> Samples:
    text = client.get("/metrics", headers=headers).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with web_client(store) as test_client:
        yield test_client


FAILED = ("drift_monitor_polls_total", (("outcome", "failed"),))
COUNT = ("drift_monitor_poll_duration_seconds_count", (("outcome", "failed"),))


def test_prune_never_lowers_a_counter(
    store: Store, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    config = Config(
        monitor=MonitorSettings(poll_timeout=10.0),
        servers=[ServerConfig(name="down", transport="http", url=refused_url())],
    )
    before = scrape(client)
    poller = Poller(store, config)
    try:
        with caplog.at_level(logging.INFO, logger="drift_monitor"):
            for _ in range(3):
                anyio.run(poller.poll, poller.jobs())
    finally:
        poller.close()
    polled = scrape(client)
    assert polled[FAILED] - before.get(FAILED, 0) == 3
    assert polled[COUNT] - before.get(COUNT, 0) == 3
    failures = [r for r in caplog.records if r.name == "drift_monitor.polls"]
    assert len(failures) == 3, "one line per failed poll"
    assert all(
        r.levelno == logging.WARNING and "poll down failed: connect" in r.getMessage() for r in failures
    )

    with store.sessions() as session:
        assert session.query(PollAttempt).count() == 3
    deleted = prune_poll_attempts(store.engine, older_than=datetime.now(UTC) + timedelta(days=1))
    assert sum(deleted.values()) >= 3
    with store.sessions() as session:
        assert session.query(PollAttempt).count() == 0

    pruned = scrape(client)
    for key, value in polled.items():
        if key[0].endswith(("_total", "_count", "_sum", "_bucket")):
            assert pruned[key] >= value, f"{key} went down after prune"
    assert pruned[FAILED] == polled[FAILED]


def test_poll_duration_is_a_cumulative_histogram(client: TestClient) -> None:
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    families = {f.name: f for f in openmetrics_families(response.text)}  # the strict parser accepts it
    histogram = families["drift_monitor_poll_duration_seconds"]
    assert histogram.type == "histogram"
    for outcome in ("ok", "failed"):
        observe_poll(PollOutcome(server="x", ok=outcome == "ok", error_kind="timeout", error="t"), 0.3)
    samples = scrape(client)
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in samples.items()
        if name == "drift_monitor_poll_duration_seconds_bucket" and dict(labels)["outcome"] == "ok"
    )
    counts = [value for _, value in buckets]
    assert counts == sorted(counts), "cumulative: each bucket holds the ones below it"
    assert buckets[-1] == (
        float("inf"),
        samples[("drift_monitor_poll_duration_seconds_count", (("outcome", "ok"),))],
    )
    build = [key for key in samples if key[0] == "drift_monitor_build_info"]
    assert len(build) == 1 and samples[build[0]] == 1
    assert {label for label, _ in build[0][1]} == {"version", "python"}


def test_per_server_gauges_follow_the_servers(store: Store, client: TestClient) -> None:
    now = datetime.now(UTC)
    ids = sync_servers(
        store,
        [
            ServerConfig(name="a", transport="http", url="http://127.0.0.1:9/mcp"),
            ServerConfig(name="b", transport="http", url="http://127.0.0.1:9/mcp"),
        ],
        now,
    )
    record_poll(store, ids["a"], [tool("t", read_only=True, description="d")], now)
    record_poll(store, ids["a"], [tool("t", read_only=False, description="d")], now + timedelta(seconds=1))
    samples = scrape(client)
    assert samples[("drift_monitor_server_up", (("server", "a"),))] == 1
    assert ("drift_monitor_server_up", (("server", "b"),)) not in samples, "never polled: no up sample"
    assert samples[("drift_monitor_server_version", (("server", "a"),))] == 2
    assert samples[("drift_monitor_server_version", (("server", "b"),))] == 0
    store.record_failure(
        ids["a"], "connect", "refused", started_at=now, finished_at=now + timedelta(seconds=2)
    )
    assert scrape(client)[("drift_monitor_server_up", (("server", "a"),))] == 0


def test_a_new_version_is_one_line_with_its_worst_severity(caplog: pytest.LogCaptureFixture) -> None:
    def outcome(*severities: Severity, new: bool = True) -> PollOutcome:
        findings = [Finding("r", s, "t", None, None, None, "m") for s in severities]
        return PollOutcome(
            server="search", ok=True, tool_count=3, version=2, new_version=new, findings=findings
        )

    with caplog.at_level(logging.INFO, logger="drift_monitor"):
        observe_poll(outcome(Severity.LOW, Severity.CRITICAL), 0.1)
        observe_poll(outcome(new=False), 0.1)
        observe_poll(outcome(Severity.LOW), 0.1)
    lines: list[Any] = [
        (r.levelno, r.getMessage()) for r in caplog.records if r.name == "drift_monitor.polls"
    ]
    assert lines == [
        (logging.WARNING, "server search: new version 2 (3 tools, 2 findings, worst critical)"),
        (logging.INFO, "server search: new version 2 (3 tools, 1 findings, worst low)"),
    ]


def test_the_metrics_of_several_processes_merge_into_one_processs() -> None:
    """`serve`'s decision processes report theirs to the main process, whose /metrics gives the sum:
    two real registries, as two processes would have them."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from monitor.metrics import merged

    def process(decisions: dict[str, int], timings: list[float], build: str) -> list[Any]:
        registry = CollectorRegistry()
        counter = Counter("decisions", "d", ["decision"], registry=registry)
        for decision, count in decisions.items():
            counter.labels(decision).inc(count)
        histogram = Histogram("took", "t", buckets=(0.1, 1.0), registry=registry)
        for timing in timings:
            histogram.observe(timing)
        Gauge("build", "b", ["version"], registry=registry).labels(build).set(1)
        return list(registry.collect())

    first = process({"allow": 3, "deny": 1}, [0.05, 0.5], "1.0")
    second = process({"allow": 2, "ask": 4}, [2.0], "1.0")
    allow_created = [
        sample.value
        for family in [*first, *second]
        for sample in family.samples
        if sample.name == "decisions_created" and sample.labels == {"decision": "allow"}
    ]
    families = merged([*first, *second])
    assert [family.name for family in families] == ["decisions", "took", "build"]
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    assert samples == {
        ("decisions_total", (("decision", "allow"),)): 5.0,
        ("decisions_total", (("decision", "deny"),)): 1.0,
        ("decisions_total", (("decision", "ask"),)): 4.0,
        ("took_bucket", (("le", "0.1"),)): 1.0,
        ("took_bucket", (("le", "1.0"),)): 2.0,
        ("took_bucket", (("le", "+Inf"),)): 3.0,
        ("took_count", ()): 3.0,
        ("took_sum", ()): 2.55,
        ("build", (("version", "1.0"),)): 1.0,  # a gauge is not summed
    }
    (earliest,) = [
        s.value
        for s in families[0].samples
        if s.name == "decisions_created" and s.labels == {"decision": "allow"}
    ]
    assert len(allow_created) == 2 and earliest == min(allow_created)
