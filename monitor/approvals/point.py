"""The decision point of one process: the decision cache, the session heart-beats and the counters.

Every adapter (the decision API, the Claude Code hook, the ToolHive PDP) asks `DecisionPoint.decide`,
so they answer alike, count alike in /metrics and keep their non-allow answers alike. An allow from
a fresh view costs one indexed read; only non-allow answers and session beats write.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, Metric

from monitor.approvals.cache import DecisionView, ServerView
from monitor.approvals.policy import Verdict
from monitor.approvals.recorder import DecisionRecorder, DecisionWrite, SessionBeats
from monitor.config import Config
from monitor.core.states import DecisionKind
from monitor.metrics import DECISION_DURATION
from monitor.store import Store


@dataclass(frozen=True)
class Answer:
    server: ServerView
    tool: str
    verdict: Verdict

    def to_dict(self) -> dict[str, object]:
        return {
            "server": self.server.name,
            "tool": self.tool,
            **self.verdict.to_dict(),
            "fingerprint": self.server.current_fingerprint,
        }


class DecisionCounts:
    """Decisions answered by this process, by decision and reason (a Prometheus collector)."""

    def __init__(self, dropped: Callable[[], int]) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._dropped = dropped

    def add(self, verdict: Verdict) -> None:
        with self._lock:
            for reason in verdict.reasons:
                self._counts[verdict.decision.value, reason] += 1

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "drift_monitor_decisions",
            "Decisions this process answered, by decision and reason (a stale-listing decision is also "
            "counted under its main reason).",
            labels=["decision", "reason"],
        )
        with self._lock:
            items = sorted(self._counts.items())
        for (decision, reason), count in items:
            family.add_metric([decision, reason], count)
        dropped = CounterMetricFamily(
            "drift_monitor_decision_records_dropped",
            "Decisions this process could not keep for review because too many were waiting to be written.",
        )
        dropped.add_metric([], self._dropped())
        return [family, dropped]


class DecisionPoint:
    """What every adapter asks: one per web app, kept on `app.state.decision_point`."""

    def __init__(self, store: Store, config: Config, clock: Callable[[], datetime]) -> None:
        self.config = config
        self.clock = clock
        self.view = DecisionView(store.engine)
        self.beats = SessionBeats()
        self.recorder = DecisionRecorder(store, keep=config.monitor.decisions_kept)
        self.counts = DecisionCounts(lambda: self.recorder.dropped)

    def server_name(self, host_name: str) -> str:
        """The monitor's name for a server a host calls `host_name` (config `aliases`)."""
        return aliases(self.config).get(host_name, host_name)

    def decide(
        self,
        server: str,
        tool: str,
        *,
        fingerprint: str | None = None,
        session_id: str | None = None,
        client: str | None = None,
    ) -> Answer | None:
        """The answer about one tool; None when the monitor knows no server of that name."""
        with DECISION_DURATION.time():
            return self._decide(server, tool, fingerprint, session_id, client)

    def _decide(
        self, server: str, tool: str, fingerprint: str | None, session_id: str | None, client: str | None
    ) -> Answer | None:
        view = self.view.server(server)
        if view is None:
            return None
        verdict = view.verdict(tool)
        if fingerprint is not None and view.current_fingerprint and fingerprint != view.current_fingerprint:
            verdict = verdict.stale()
        self.counts.add(verdict)
        holding = fingerprint or view.current_fingerprint
        beat_due = (
            session_id is not None and holding is not None and self.beats.due(view.name, session_id, holding)
        )
        if verdict.decision != DecisionKind.ALLOW or beat_due:
            self.recorder.submit(
                DecisionWrite(
                    server_id=view.server_id,
                    server=view.name,
                    tool=tool,
                    verdict=verdict if verdict.decision != DecisionKind.ALLOW else None,
                    session_id=session_id,
                    client=client,
                    holding=holding if beat_due else None,
                    at=self.clock(),
                )
            )
        return Answer(view, tool, verdict)


def aliases(config: Config) -> dict[str, str]:
    return {alias: server.name for server in config.servers for alias in server.aliases}
