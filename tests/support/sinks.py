"""Loopback receivers shaped like Alertmanager's API v2 and PagerDuty's Events API v2.

Each checks a request the way the product does and answers as it does: Alertmanager `POST
/api/v2/alerts` takes a JSON array of postable alerts (`labels` required and non-empty, valid label
names, string values, RFC 3339 `startsAt`/`endsAt`, `startsAt` not after `endsAt`) and answers 200
with an empty body, 400 otherwise; it keeps each alert by its label set, sets a missing `endsAt` to
now + resolve_timeout, merges a post into the alert it has by Alertmanager's own rule (only when
their spans overlap; see `Alertmanager.handle`), and counts the posts. PagerDuty `POST /v2/enqueue`
takes one event (`routing_key` of 32 characters, `event_action` trigger/acknowledge/resolve,
`dedup_key` up to 255 characters, required for acknowledge and resolve; a trigger's `payload` with
`summary` up to 1024 characters, `source`, and `severity` critical/error/warning/info) and answers
202 `{"status": "success", "message": "Event processed", "dedup_key": ...}`, or 400 `{"status":
"invalid event", "errors": [...]}`.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from support.processes import WAIT

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESOLVE_TIMEOUT = timedelta(minutes=5)


class _JsonReceiver:
    path = "/"

    def __init__(self) -> None:
        self.port = 0
        self.rejected: list[tuple[Any, list[str]]] = []
        self._changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def __enter__(self) -> Any:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != receiver.path:
                    status, answer = 404, b"not found"
                elif self.headers.get("content-type", "").partition(";")[0] != "application/json":
                    status, answer = 415, b"unsupported media type"
                else:
                    try:
                        document = json.loads(body)
                    except ValueError:
                        status, answer = 400, b"not JSON"
                    else:
                        with receiver._changed:
                            status, reply = receiver.handle(document)
                            receiver._changed.notify_all()
                        answer = json.dumps(reply).encode() if reply is not None else b""
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = False
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02})
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def handle(self, document: Any) -> tuple[int, Any]:
        raise NotImplementedError

    def wait_for(self, predicate: Any, timeout: float = WAIT) -> bool:
        with self._changed:
            return bool(self._changed.wait_for(lambda: predicate(self), timeout))


@dataclass
class AlertmanagerAlert:
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime
    generator_url: str | None
    explicit_end: bool
    posts: int = 1
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def resolved(self, now: datetime) -> bool:
        return self.explicit_end and self.ends_at <= now

    def firing(self, now: datetime) -> bool:
        return self.ends_at > now


class Alertmanager(_JsonReceiver):
    path = "/api/v2/alerts"

    def __init__(self) -> None:
        super().__init__()
        self.alerts: dict[tuple[tuple[str, str], ...], AlertmanagerAlert] = {}
        self.posts = 0

    def handle(self, document: Any) -> tuple[int, Any]:
        errors = _alertmanager_errors(document)
        if errors:
            self.rejected.append((document, errors))
            return 400, "; ".join(errors)
        self.posts += 1
        now = datetime.now().astimezone()
        for item in document:
            key = tuple(sorted(item["labels"].items()))
            ends = _time(item.get("endsAt"))
            starts = _time(item.get("startsAt")) or ends or now
            posted = AlertmanagerAlert(
                item["labels"],
                item.get("annotations", {}),
                starts,
                ends if ends is not None else now + RESOLVE_TIMEOUT,
                item.get("generatorURL"),
                explicit_end=ends is not None,
                posts=0,
            )
            known = self.alerts.get(key)
            if known is not None:
                posted.posts, posted.bodies = known.posts, known.bodies
                # Alertmanager's provider merges a post into the alert it holds only when their spans
                # overlap; otherwise the post replaces it (a firing post after a resolution fires again).
                if known.starts_at < posted.ends_at < known.ends_at or (
                    known.starts_at < posted.starts_at < known.ends_at
                ):
                    posted = _merged(known, posted, now)
            posted.posts += 1
            posted.bodies.append(item)
            self.alerts[key] = posted
        return 200, None


def _merged(old: AlertmanagerAlert, new: AlertmanagerAlert, now: datetime) -> AlertmanagerAlert:
    """Alertmanager's `Alert.Merge` with the newer post: its fields, the earlier start, and the old end
    when that is later and was stated (a resolution's, or an explicit end)."""
    new.starts_at = min(old.starts_at, new.starts_at)
    if new.ends_at <= now:
        if old.ends_at <= now and old.ends_at > new.ends_at:
            new.ends_at, new.explicit_end = old.ends_at, old.explicit_end
    elif old.ends_at > new.ends_at and old.explicit_end:
        new.ends_at, new.explicit_end = old.ends_at, True
    return new


def _alertmanager_errors(document: Any) -> list[str]:
    if not isinstance(document, list):
        return ["body: must be an array of postable alerts"]
    errors = []
    for i, item in enumerate(document):
        if not isinstance(item, dict):
            errors.append(f"[{i}]: must be an object")
            continue
        labels = item.get("labels")
        if not isinstance(labels, dict) or not labels:
            errors.append(f"[{i}].labels: at least one label pair required")
            continue
        for kind in ("labels", "annotations"):
            for name, value in (item.get(kind) or {}).items():
                if not _LABEL_NAME.match(name) or not isinstance(value, str):
                    errors.append(f"[{i}].{kind}: invalid pair {name!r}: {value!r}")
        try:
            starts, ends = _time(item.get("startsAt")), _time(item.get("endsAt"))
        except ValueError as exc:
            errors.append(f"[{i}]: {exc}")
            continue
        if starts and ends and ends < starts:
            errors.append(f"[{i}]: start time must be before end time")
        if "generatorURL" in item and not str(item["generatorURL"]).startswith(("http://", "https://")):
            errors.append(f"[{i}].generatorURL: must be a URI")
    return errors


@dataclass
class PagerDutyEvent:
    routing_key: str
    action: str
    dedup_key: str
    body: dict[str, Any]


class PagerDuty(_JsonReceiver):
    path = "/v2/enqueue"
    SEVERITIES = ("critical", "error", "warning", "info")

    def __init__(self) -> None:
        super().__init__()
        self.events: list[PagerDutyEvent] = []

    def handle(self, document: Any) -> tuple[int, Any]:
        errors = _pagerduty_errors(document)
        if errors:
            self.rejected.append((document, errors))
            return 400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors}
        key = document.get("dedup_key") or f"generated-{len(self.events)}"
        self.events.append(PagerDutyEvent(document["routing_key"], document["event_action"], key, document))
        return 202, {"status": "success", "message": "Event processed", "dedup_key": key}


def _pagerduty_errors(event: Any) -> list[str]:
    if not isinstance(event, dict):
        return ["Event object is invalid"]
    errors = []
    if not isinstance(event.get("routing_key"), str) or len(event["routing_key"]) != 32:
        errors.append("'routing_key' must be a 32-character integration key")
    action = event.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errors.append("'event_action' is invalid (must be one of: trigger, acknowledge, resolve)")
    dedup = event.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
        errors.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errors.append("'dedup_key' is required for acknowledge and resolve")
    if action == "trigger":
        payload = event.get("payload")
        if not isinstance(payload, dict):
            return [*errors, "'payload' is missing or not an object"]
        summary = payload.get("summary")
        if not isinstance(summary, str) or not 0 < len(summary) <= 1024:
            errors.append("'payload.summary' is missing or longer than 1024 characters")
        if not isinstance(payload.get("source"), str) or not payload["source"]:
            errors.append("'payload.source' is missing")
        if payload.get("severity") not in PagerDuty.SEVERITIES:
            errors.append("'payload.severity' is invalid (must be one of: critical, error, warning, info)")
        if "timestamp" in payload:
            try:
                _time(payload["timestamp"])
            except ValueError:
                errors.append("'payload.timestamp' is not ISO 8601")
        for link in event.get("links", []):
            if not isinstance(link, dict) or not isinstance(link.get("href"), str):
                errors.append("'links' entries need an 'href'")
    return errors


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an RFC 3339 date-time")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone")
    return parsed
