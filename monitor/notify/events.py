"""Alert lifecycle events for operators: one log line and one counter per alert opened,
acknowledged or resolved, once the transaction that did it commits (a rolled-back poll opened nothing).
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from monitor.core.text import make_visible
from monitor.metrics import ALERT_EVENTS
from monitor.notify.outbox import wake_after_commit
from monitor.store.models import Alert

log = logging.getLogger("drift_monitor.alerts")


def alert_event(
    session: Session,
    alert: Alert,
    server: str,
    event: str,
    *,
    by: str | None = None,
    cause: str | None = None,
) -> None:
    """Count and log `event` ("opened", "acknowledged", "resolved"; "raised" or "lowered" when its
    severity changes in place) for `alert` after commit, with
    `by`, the caller who did it (None: the monitor itself)."""
    alert_id, rule, severity, tool = alert.id, alert.rule, alert.severity, alert.tool
    subject = server + (f" / {make_visible(tool)}" if tool else "")
    if alert.session_id:
        subject += f" (session {make_visible(alert.session_id)})"
    if cause is not None:  # a resolution says why: "approved by alice as in v3", "the condition cleared"
        subject += f": {make_visible(cause)}"
    elif by is not None:
        subject += f" by {make_visible(by)}"

    def committed() -> None:
        ALERT_EVENTS.labels(event, severity).inc()
        log.log(
            logging.WARNING if event == "opened" else logging.INFO,
            "alert %s %s: %s %s on %s",
            alert_id,
            event,
            severity,
            rule,
            subject,
            extra={
                "alert_id": alert_id,
                "rule": rule,
                "severity": severity,
                "server": server,
                "event": f"alert.{event}",
                "actor": by,
                "cause": cause,
            },
        )

    wake_after_commit(session, committed)
