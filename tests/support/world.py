"""A small recorded history the API, page and browser tests share, and the app over it.

`populate` builds two servers, four versions of one of them with annotation, description, schema
and hidden-text changes, a failing server, and alerts in every state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select

from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.fingerprint import CanonicalListing, fingerprint
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert, AlertFinding, FindingRecord, WebhookDelivery
from monitor.store.polled import SuccessfulPoll
from monitor.store.registration import sync_servers
from monitor.webapp.app import create_app

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOKEN = "test-token-7f3a"
TOKEN_ENV = "DRIFT_MONITOR_TEST_API_TOKEN"

HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = '"><img src=x onerror=alert(1)>'
HOSTILE_HIDDEN = "Reads files.\u202eTRAP\u202c \U000e0041\U000e0042 zero\u200bwidth"


def tool(
    name: str,
    description: str,
    *,
    annotations: dict[str, Any] | None = None,
    schema: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": name,
        "description": description,
        "inputSchema": schema or {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    if annotations is not None:
        result["annotations"] = annotations
    result.update(extra)
    return result


def versions() -> list[list[dict[str, Any]]]:
    """Four listings of `search`, each changing something a reviewer must see."""
    v1 = [
        tool("lookup", "Look a record up.", annotations={"readOnlyHint": True, "title": "Lookup"}),
        tool(
            "wipe_index",
            "Drop a search index and rebuild it.",
            annotations={"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False},
        ),
        tool(
            "export", "Export records to a file.", annotations={"readOnlyHint": False, "idempotentHint": True}
        ),
    ]
    v2 = [
        tool("lookup", "Look a record up, and update its access time.", annotations={"readOnlyHint": False}),
        v1[1],
        tool(
            "export",
            "Export records to a file.",
            annotations={"readOnlyHint": False, "idempotentHint": True},
            schema={
                "type": "object",
                "properties": {"q": {"type": "string"}, "path": {"type": "string"}},
                "required": ["path"],
            },
        ),
        tool("purge", "Delete every record of a tenant."),
    ]
    v3 = [
        v2[0],
        v2[1],
        v2[2],
        tool("purge", "Delete every record of a tenant. " + HOSTILE_SCRIPT + " " + HOSTILE_IMG),
        tool(HOSTILE_SCRIPT, HOSTILE_HIDDEN, annotations={"readOnlyHint": True, "title": HOSTILE_IMG}),
    ]
    v4 = [v3[0], v3[1], v3[3], v3[4]]  # export removed
    return [v1, v2, v3, v4]


@dataclass
class World:
    store: Store
    search_id: int
    files_id: int
    times: list[datetime]
    """first_seen of each version of `search`."""
    fingerprints: list[str]
    alert_ids: dict[str, int]


def record(store: Store, server_id: int, tools: list[dict[str, Any]], at: datetime) -> PollOutcome:
    """A 120 ms poll of `tools` by a server that names itself and advertises list-changed."""
    return store.record(
        SuccessfulPoll(
            server_id,
            CanonicalListing.of(tools),
            started_at=at - timedelta(milliseconds=120),
            finished_at=at,
            pages=1,
            protocol_version="2025-11-25",
            server_info={"name": "search-server", "version": "1.0"},
            capabilities={"tools": {"listChanged": True}},
            list_changed_advertised=True,
        )
    )


def populate(store: Store) -> World:
    ids = sync_servers(
        store,
        [
            ServerConfig(name="search", transport="http", url="https://mcp.example.com/mcp"),
            ServerConfig(name="files", transport="stdio", command="mcp-files"),
        ],
        T0,
    )
    times: list[datetime] = []
    prints: list[str] = []
    for index, listing in enumerate(versions()):
        first = T0 + timedelta(hours=index)
        record(store, ids["search"], listing, first)
        record(store, ids["search"], listing, first + timedelta(minutes=30))  # an unchanged poll
        times.append(first)
        prints.append(fingerprint(listing))
    record(store, ids["files"], [tool("read", "Read a file.", annotations={"readOnlyHint": True})], T0)
    for minute in range(3):
        at = T0 + timedelta(hours=1, minutes=minute)
        store.record_failure(ids["files"], "connect", "connection refused", started_at=at, finished_at=at)
    alert_ids: dict[str, int] = {}
    with store.sessions.begin() as session:
        revoked = session.scalar(select(FindingRecord).where(FindingRecord.rule == "read-only-revoked"))
        assert revoked is not None
        for state, rule, severity, rank, tool_name in (
            ("open", "read-only-revoked", "critical", 4, "lookup"),
            ("acknowledged", "tool-added", "medium", 2, "purge"),
            ("resolved", "server-unreachable", "high", 3, None),
            ("open", "hidden-text-in-description", "high", 3, HOSTILE_SCRIPT),
        ):
            alert = Alert(
                server_id=ids["search"] if rule != "server-unreachable" else ids["files"],
                rule=rule,
                severity=severity,
                severity_rank=rank,
                tool=tool_name,
                state=state,
                open_key=None if state == "resolved" else f"{rule}/{tool_name}",
                message=f"{rule} on {tool_name}: {HOSTILE_IMG}"
                if tool_name == HOSTILE_SCRIPT
                else f"{rule}.",
                opened_at=T0 + timedelta(hours=1),
                last_seen_at=T0 + timedelta(hours=1),
                acknowledged_at=T0 + timedelta(hours=2) if state == "acknowledged" else None,
                resolved_at=T0 + timedelta(hours=2) if state == "resolved" else None,
            )
            session.add(alert)
            session.flush()
            alert_ids[f"{state}:{rule}"] = alert.id
            if rule == "read-only-revoked":
                session.add(AlertFinding(alert_id=alert.id, finding_id=revoked.id))
        session.add(
            WebhookDelivery(
                id="d-1",
                webhook="ops",
                alert_id=alert_ids["open:read-only-revoked"],
                event_type="alert.opened",
                body="{}",
                state="pending",
                created_at=T0,
                next_attempt_at=T0,
                expires_at=T0 + timedelta(days=1),
                attempts=0,
            )
        )
    return World(store, ids["search"], ids["files"], times, prints, alert_ids)


def make_app(
    store: Store, monkeypatch: pytest.MonkeyPatch, *, token: str | None = TOKEN, poll_now: Any = None
) -> FastAPI:
    if token is None:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
    else:
        monkeypatch.setenv(TOKEN_ENV, token)
    # Polled hourly: the app's clock (two hours past the last poll) finds every listing recent.
    config = Config(monitor=MonitorSettings(api_token_env=TOKEN_ENV, poll_interval=3600), source="test")
    app = create_app(store, config, poll_now=poll_now)
    app.state.web.clock = lambda: T0 + timedelta(hours=5)
    return app


AUTH = {"Authorization": f"Bearer {TOKEN}"}
