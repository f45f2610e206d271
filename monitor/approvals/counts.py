"""What the decision point counts as it answers, for Prometheus (`monitor.metrics` collects it)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, Metric

from monitor.approvals.policy import Verdict


class DecisionCounts:
    """Decisions answered by this process, by decision and reason, and the calls about unmonitored
    servers, by host (a Prometheus collector)."""

    def __init__(self, dropped: Callable[[], int]) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._unmonitored: Counter[str] = Counter()
        self._dropped = dropped

    def add(self, verdict: Verdict) -> None:
        with self._lock:
            for reason in verdict.reasons:
                self._counts[verdict.decision.value, reason] += 1

    def add_unmonitored(self, host: str) -> None:
        with self._lock:
            self._unmonitored[host] += 1

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "drift_monitor_decisions",
            "Decisions this process answered, by decision and reason (a stale-listing decision is also "
            "counted under its main reason).",
            labels=["decision", "reason"],
        )
        unmonitored = CounterMetricFamily(
            "drift_monitor_unmonitored_calls",
            "Calls hosts asked about whose server the monitor does not know, by host adapter.",
            labels=["host"],
        )
        with self._lock:
            items = sorted(self._counts.items())
            hosts = sorted(self._unmonitored.items())
        for (decision, reason), count in items:
            family.add_metric([decision, reason], count)
        for host, count in hosts:
            unmonitored.add_metric([host], count)
        dropped = CounterMetricFamily(
            "drift_monitor_decision_records_dropped",
            "Decisions this process could not keep for review because too many were waiting to be written.",
        )
        dropped.add_metric([], self._dropped())
        return [family, unmonitored, dropped]
