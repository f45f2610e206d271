"""A seeded incident, the shape the dashboard has to be quick in: five servers (one failing), four
host sessions (three of them stale), a dozen alerts of every severity raised through the one alert
path, one of them acknowledged.

Every alert comes from recorded polls and the session check, as `serve` would raise them; the
critical `read-only-revoked` is among the oldest, so sorting by id alone would bury it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select

from monitor.config import ServerConfig
from monitor.core.findings import Severity
from monitor.core.fingerprint import fingerprint
from monitor.notify import alerts, handling
from monitor.sessions import service as sessions
from monitor.store import Store
from monitor.store.models import Alert
from monitor.store.registration import sync_servers
from support.tools import tool
from support.world import NOW, QUERY, T0, record, versions


@dataclass(frozen=True)
class Incident:
    store: Store
    alert_ids: dict[str, int]
    """`rule/tool-or-session` -> alert id."""
    acknowledged: int
    """The id of the alert someone acknowledged (still unresolved)."""


def _github(tools_v2: bool) -> list[dict[str, object]]:
    create = {"readOnlyHint": False, "destructiveHint": False}
    listing = [
        tool(
            "list_issues",
            description="List issues of a repository.",
            input_schema=QUERY,
            annotations={"readOnlyHint": True},
        ),
        tool("create_issue", description="Open an issue.", input_schema=QUERY, annotations=create),
    ]
    if tools_v2:
        listing[0] = tool(
            "list_issues",
            description="List issues of a repository.",
            input_schema=QUERY,
            annotations={"readOnlyHint": False},
        )
        listing.append(
            tool(
                "merge_pr",
                description="Merge a pull request.",
                input_schema=QUERY,
                annotations={"destructiveHint": True},
            )
        )
    return listing


def seed_incident(store: Store, policy: alerts.Alerting) -> Incident:
    """Record the incident through `store`, whose hooks must include `policy` (the alert path)."""
    ids = sync_servers(
        store,
        [
            ServerConfig(name="search", transport="http", url="https://mcp.example.com/mcp"),
            ServerConfig(name="files", transport="stdio", command="mcp-files"),
            ServerConfig(name="github", transport="http", url="https://mcp.github.example/mcp"),
            ServerConfig(name="slack", transport="sse", url="https://slack.example/sse"),
            ServerConfig(name="tickets", transport="http", url="https://tickets.example/mcp"),
        ],
        T0,
    )
    for index, listing in enumerate(versions()):
        record(store, ids["search"], listing, T0 + timedelta(hours=index))
    record(store, ids["search"], versions()[-1], NOW - timedelta(minutes=2))
    record(store, ids["github"], _github(False), T0)
    record(store, ids["github"], _github(True), T0 + timedelta(hours=3, minutes=30))
    slack = [
        tool(
            "post_message",
            description="Post to a channel.",
            input_schema=QUERY,
            annotations={"openWorldHint": True},
        )
    ]
    record(store, ids["slack"], slack, T0)
    record(
        store,
        ids["slack"],
        [*slack, tool("delete_message", description="Delete a message.", input_schema=QUERY)],
        T0 + timedelta(hours=4),
    )
    record(store, ids["tickets"], [tool("open_ticket", description="Open a ticket.", input_schema=QUERY)], T0)
    record(
        store,
        ids["files"],
        [tool("read", description="Read a file.", input_schema=QUERY, annotations={"readOnlyHint": True})],
        T0,
    )
    for minute in range(3):
        at = T0 + timedelta(hours=4, minutes=minute)
        store.record_failure(ids["files"], "connect", "connection refused", started_at=at, finished_at=at)
    prints = [fingerprint(listing) for listing in versions()]
    reports = [
        ("search", "claude-code-7f2", "claude-code/2.1", prints[0], T0 + timedelta(minutes=5)),
        ("search", "gateway-a", "toolhive/0.9", prints[2], T0 + timedelta(hours=2, minutes=10)),
        ("github", "cursor-31", "cursor/1.4", fingerprint(_github(False)), T0 + timedelta(minutes=20)),
        (
            "tickets",
            "claude-code-9c1",
            "claude-code/2.1",
            fingerprint([tool("open_ticket", description="Open a ticket.", input_schema=QUERY)]),
            T0,
        ),
    ]
    with store.sessions.begin() as session:
        for server, session_id, client, held, connected in reports:
            sessions.register_session(
                session,
                server=server,
                session_id=session_id,
                client=client,
                connected_at=connected,
                fingerprint=held,
                tools=None,
                now=connected,
            )
        sessions.check_sessions(
            session,
            now=NOW,
            grace=timedelta(minutes=5),
            max_age=timedelta(hours=8),
            expiry=timedelta(days=1),
            policy=policy,
        )
    with store.sessions.begin() as session:
        rows = session.execute(select(Alert.id, Alert.rule, Alert.tool, Alert.session_id)).all()
        alert_ids = {
            f"{rule}/{tool_name or session_id or '-'}": alert_id
            for alert_id, rule, tool_name, session_id in rows
        }
        acknowledged = alert_ids["tool-added/purge"]
        handling.acknowledge(session, acknowledged, NOW - timedelta(minutes=30), by="dana")
    return Incident(store, alert_ids, acknowledged)


def incident_policy() -> alerts.Alerting:
    """Alerts from low severity up, no webhooks: every finding a person should see opens one."""
    return alerts.Alerting(base_url="http://127.0.0.1", min_severity=Severity.LOW)
