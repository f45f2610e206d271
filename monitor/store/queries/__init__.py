"""Read-side queries for the web layer: every page and endpoint reads storage through these.

Each function takes an open Session, issues a few indexed statements and returns records
(`monitor.store.records`); nothing here writes or re-derives stored findings. The modules split
by resource: servers, a server's history (versions, listings, diffs, tool histories), changes,
alerts and the metrics counts.
"""

from monitor.store.queries.alerts import (
    alert_state_counts,
    find_alert,
    list_alerts,
    open_alert_counts,
    unresolved_alerts,
)
from monitor.store.queries.changes import list_changes
from monitor.store.queries.history import (
    DiffView,
    InForce,
    ToolChangeView,
    current_snapshots,
    diff_versions,
    find_snapshot,
    first_snapshot_time,
    list_snapshots,
    listing_tools,
    server_definition,
    snapshot_at,
    snapshot_listing,
    tool_history,
    version_summaries,
)
from monitor.store.queries.metrics import MetricsData, read_metrics
from monitor.store.queries.servers import (
    AttemptRow,
    find_server,
    list_servers,
    recent_attempts,
    redact_url,
    server_id,
    server_names,
)

__all__ = [
    "AttemptRow",
    "DiffView",
    "InForce",
    "MetricsData",
    "ToolChangeView",
    "alert_state_counts",
    "current_snapshots",
    "diff_versions",
    "find_alert",
    "find_server",
    "find_snapshot",
    "first_snapshot_time",
    "list_alerts",
    "list_changes",
    "list_servers",
    "list_snapshots",
    "listing_tools",
    "open_alert_counts",
    "read_metrics",
    "recent_attempts",
    "redact_url",
    "server_definition",
    "server_id",
    "server_names",
    "snapshot_at",
    "snapshot_listing",
    "tool_history",
    "unresolved_alerts",
    "version_summaries",
]
