"""What operators see of each poll: a log line when it matters, and the process's poll metrics.

One line per failed poll and per new version (with its worst finding); an unchanged listing is
the normal case and logs nothing. Server text in an error (an HTTP reason, a message) is shown
with invisible and control characters made visible, so it cannot forge log lines.
"""

from __future__ import annotations

import logging

from monitor.core.findings import Severity
from monitor.core.text import make_visible
from monitor.metrics import NEW_VERSIONS, POLL_DURATION, POLLS
from monitor.store import PollOutcome

log = logging.getLogger("drift_monitor.polls")


def observe_poll(outcome: PollOutcome, seconds: float) -> None:
    result = "ok" if outcome.ok else "failed"
    POLLS.labels(result).inc()
    POLL_DURATION.labels(result).observe(seconds)
    if not outcome.ok:
        log.warning(
            "poll %s failed: %s: %s",
            outcome.server,
            outcome.error_kind,
            make_visible(outcome.error or ""),
            extra={"server": outcome.server, "error_kind": outcome.error_kind, "event": "poll.failed"},
        )
        return
    if not outcome.new_version:
        return
    worst = outcome.worst
    NEW_VERSIONS.labels(str(worst) if worst else "none").inc()
    level = logging.WARNING if worst is not None and worst.rank >= Severity.HIGH.rank else logging.INFO
    log.log(
        level,
        "server %s: new version %s (%d tools, %d findings, worst %s)",
        outcome.server,
        outcome.version,
        outcome.tool_count,
        len(outcome.findings),
        worst or "none",
        extra={
            "server": outcome.server,
            "version": outcome.version,
            "worst_severity": str(worst) if worst else None,
            "event": "poll.new_version",
        },
    )
