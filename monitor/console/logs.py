"""How the long-running command logs: one line per event that matters, as text or JSON.

`serve` logs poll failures, new versions, alert events and delivery failures at INFO and above.
APScheduler's per-run lines ("Running job ...", two a second) and uvicorn's per-request access
lines are chatter: they show only with `--log-level debug`. `--log-format json` writes one JSON
object per line (time, level, logger, message, and the event's fields such as `server`,
`severity`, `event`) for log shippers. Nothing logged carries a secret: messages are built from
names, kinds and scrubbed errors, never from headers, environment values or webhook URLs.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

CHATTY = ("apscheduler", "uvicorn.access", "alembic")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_LEFT_OUT = {"color_message"}
"""Extras no log shipper wants: uvicorn's copy of its message with ANSI colour codes."""


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            {
                k: v
                for k, v in vars(record).items()
                if k not in _STANDARD and k not in _LEFT_OUT and not k.startswith("_")
            }
        )
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure` installs, told apart from any other (a test runner's) on the root."""


def configure(level: str = "info", fmt: str = "text") -> None:
    """Root logging to stderr for this process; chatty libraries only at DEBUG."""
    handler = _OurHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(existing)
    root.addHandler(handler)
    numeric = getattr(logging, level.upper())
    root.setLevel(numeric)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)


def quiet() -> None:
    """For the one-shot commands, which print what happened themselves: the monitor's log records
    (a failed poll, an alert opened) are not echoed to stderr by logging's last-resort handler."""
    for name in ("drift_monitor", "monitor"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())
