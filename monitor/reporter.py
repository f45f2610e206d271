"""Report host sessions to drift-monitor, from a host or gateway.

A host caches each server's `tools/list` when it connects. Tell drift-monitor which listing each
session holds, and it raises `session-stale` when the server's listing moves on without the
session (with what the session missed: "still treats purge_tenant as read-only"), and
`session-long-lived` when a session outlives the configured maximum age.

Standard library only, so a gateway can vendor this file::

    from monitor.reporter import SessionReporter

    reporter = SessionReporter("http://127.0.0.1:8000", token=os.environ["DRIFT_MONITOR_API_TOKEN"])
    reporter.opened("search", session_id, client="my-gateway/1.4", tools=raw_tools)  # the wire JSON
    ...
    reporter.heartbeat("search", session_id)                  # every minute or so
    reporter.heartbeat("search", session_id, tools=new_tools)  # after re-fetching tools/list
    reporter.closed("search", session_id)

Pass the tools exactly as the server sent them (or their `monitor.fingerprint.fingerprint`);
an SDK model dump drops fields and adds others, and would never match.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from typing import Any


class ReportError(RuntimeError):
    """drift-monitor refused a report or could not be reached; the message says which."""


class SessionReporter:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 5.0) -> None:
        self.base = base_url.rstrip("/") + "/api/v1/sessions"
        self.token = token
        self.timeout = timeout

    def opened(
        self,
        server: str,
        session_id: str,
        *,
        client: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        fingerprint: str | None = None,
        connected_at: datetime | None = None,
        client_capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Report a new session and the listing it cached (the tools, or their fingerprint), and
        optionally the capabilities the host declared (the session is compared with that view)."""
        body: dict[str, Any] = {
            "server": server,
            "session_id": session_id,
            "client": client,
            "connected_at": (connected_at or datetime.now(UTC)).isoformat(),
        }
        if client_capabilities is not None:
            body["client_capabilities"] = client_capabilities
        body.update(_listing(tools, fingerprint))
        return self._send("POST", self.base, body)

    def heartbeat(
        self,
        server: str,
        session_id: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        fingerprint: str | None = None,
    ) -> dict[str, Any]:
        """Keep the session alive; pass the tools again after the session re-fetched its listing."""
        return self._send("PUT", self._url(server, session_id), _listing(tools, fingerprint))

    def closed(self, server: str, session_id: str) -> None:
        self._send("DELETE", self._url(server, session_id), None)

    def _url(self, server: str, session_id: str) -> str:
        return f"{self.base}/{urllib.parse.quote(server, safe='')}/{urllib.parse.quote(session_id, safe='')}"

    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - the caller's monitor URL
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise ReportError(f"drift-monitor answered {exc.code} to {method} {url}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise ReportError(f"cannot reach drift-monitor at {url}: {exc}") from None
        if not payload:
            return {}
        result = json.loads(payload)
        return result if isinstance(result, dict) else {"result": result}


def _listing(tools: list[dict[str, Any]] | None, fingerprint: str | None) -> dict[str, Any]:
    if tools is not None:
        return {"tools": tools}
    if fingerprint is not None:
        return {"fingerprint": fingerprint}
    return {}
