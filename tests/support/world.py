"""A small recorded history the API, page and browser tests share (`support.web` builds the app over it).

`populate` builds two servers, four versions of one of them with annotation, description, schema
and hidden-text changes, a failing server, and alerts in every state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from monitor.config import ServerConfig
from monitor.core.fingerprint import fingerprint
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert, AlertFinding, FindingRecord, WebhookDelivery
from monitor.store.registration import sync_servers
from support.polls import record_poll
from support.tools import tool

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=5)
"""The instant the history is looked at: the clock of the app over it (`support.web.make_app`)."""
QUERY = {"type": "object", "properties": {"q": {"type": "string"}}}
"""The input schema of the tools these servers list, unless a version changes it."""

HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = '"><img src=x onerror=alert(1)>'
HOSTILE_HIDDEN = "Reads files.\u202eTRAP\u202c \U000e0041\U000e0042 zero\u200bwidth"


def versions() -> list[list[dict[str, Any]]]:
    """Four listings of `search`, each changing something a reviewer must see."""
    v1 = [
        tool(
            "lookup",
            description="Look a record up.",
            input_schema=QUERY,
            annotations={"readOnlyHint": True, "title": "Lookup"},
        ),
        tool(
            "wipe_index",
            description="Drop a search index and rebuild it.",
            input_schema=QUERY,
            annotations={"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False},
        ),
        tool(
            "export",
            description="Export records to a file.",
            input_schema=QUERY,
            annotations={"readOnlyHint": False, "idempotentHint": True},
        ),
    ]
    v2 = [
        tool(
            "lookup",
            description="Look a record up, and update its access time.",
            input_schema=QUERY,
            annotations={"readOnlyHint": False},
        ),
        v1[1],
        tool(
            "export",
            description="Export records to a file.",
            input_schema={
                "type": "object",
                "properties": {"q": {"type": "string"}, "path": {"type": "string"}},
                "required": ["path"],
            },
            annotations={"readOnlyHint": False, "idempotentHint": True},
        ),
        tool("purge", description="Delete every record of a tenant.", input_schema=QUERY),
    ]
    v3 = [
        v2[0],
        v2[1],
        v2[2],
        tool(
            "purge",
            description="Delete every record of a tenant. " + HOSTILE_SCRIPT + " " + HOSTILE_IMG,
            input_schema=QUERY,
        ),
        tool(
            HOSTILE_SCRIPT,
            description=HOSTILE_HIDDEN,
            input_schema=QUERY,
            annotations={"readOnlyHint": True, "title": HOSTILE_IMG},
        ),
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
    """A 120 ms poll of `tools` that finished at `at`, from a server that advertises list-changed."""
    return record_poll(
        store,
        server_id,
        tools,
        at,
        started_at=at - timedelta(milliseconds=120),
        server_info={"name": "search-server", "version": "1.0"},
        capabilities={"tools": {"listChanged": True}},
        list_changed_advertised=True,
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
    files = [tool("read", description="Read a file.", input_schema=QUERY, annotations={"readOnlyHint": True})]
    record(store, ids["files"], files, T0)
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
