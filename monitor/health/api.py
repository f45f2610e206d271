"""Operations: /healthz for load balancers (no token) and /metrics for Prometheus."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from monitor.core.states import AlertState
from monitor.health.gauges import server_gauges
from monitor.identity.callers import may_read
from monitor.metrics import REGISTRY, merged
from monitor.store import queries
from monitor.store.records import SEVERITIES
from monitor.web.context import WebContext
from monitor.web.deps import ReadSession, Web
from monitor.web.schemas import ERRORS, ApiJSONResponse

public = APIRouter(tags=["operations"], default_response_class=ApiJSONResponse)
"""Endpoints outside the token check: only /healthz."""
router = APIRouter(tags=["operations"], dependencies=[Depends(may_read)], responses=ERRORS)


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    detail: str | None = None


HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": Health, "description": "The database answers"},
    503: {"model": Health, "description": "The database does not answer"},
}


def _health(web: WebContext) -> Response:
    try:
        with web.store.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError:
        body = Health(status="unavailable", detail="the database did not answer")
        return ApiJSONResponse(body.model_dump(), status_code=503)
    return ApiJSONResponse(Health(status="ok").model_dump(exclude_none=True))


@public.get("/healthz", responses=HEALTH_RESPONSES, summary="Liveness (no auth)")
def healthz(web: Web) -> Response:
    return _health(web)


@public.get("/api/v1/healthz", responses=HEALTH_RESPONSES, include_in_schema=False)
def healthz_v1(web: Web) -> Response:
    return _health(web)


class DatabaseCollector:
    """The gauges of one scrape, read from the database, so every monitor process reports the same
    state. Counters and histograms are this process's own (`monitor.metrics`)."""

    def __init__(self, data: queries.MetricsData, now: datetime) -> None:
        self.data = data
        self.now = now

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        data = self.data
        servers = GaugeMetricFamily(
            "drift_monitor_servers", "Registered servers by status.", labels=["status"]
        )
        for status, count in data.servers_by_status.items():
            servers.add_metric([status.value.replace(" ", "_")], count)
        alerts = GaugeMetricFamily(
            "drift_monitor_alerts", "Unresolved alerts by state and severity.", labels=["state", "severity"]
        )
        for (state, severity), count in sorted(data.alerts.items()):
            alerts.add_metric([state.value, severity], count)
        open_alerts = GaugeMetricFamily(
            "drift_monitor_open_alerts", "Open (unacknowledged) alerts by severity.", labels=["severity"]
        )
        for severity in SEVERITIES:
            open_alerts.add_metric([severity], data.alerts[(AlertState.OPEN, severity)])
        pending = GaugeMetricFamily(
            "drift_monitor_webhook_deliveries_pending", "Webhook deliveries waiting in the outbox."
        )
        pending.add_metric([], data.pending_deliveries)
        age = GaugeMetricFamily(
            "drift_monitor_webhook_oldest_pending_age_seconds",
            "Age of the oldest pending delivery (0 if none).",
        )
        oldest = data.oldest_pending_delivery
        age.add_metric([], max(0.0, (self.now - oldest).total_seconds()) if oldest else 0.0)
        versions = GaugeMetricFamily("drift_monitor_snapshot_versions", "Stored listing versions.")
        versions.add_metric([], data.snapshot_versions)
        return [servers, alerts, open_alerts, pending, age, versions, *server_gauges(data.servers)]


class SkippedServers(BaseModel):
    skipped: list[str]
    """One line per server entry the config names but the monitor does not poll (an imported entry it
    cannot read, an unset variable, an unreadable env_file), saying which and why."""


@router.get("/api/v1/config/skipped", summary="Configured servers that are not monitored, and why")
def skipped_servers(web: Web) -> SkippedServers:
    return SkippedServers(skipped=list(web.config.skipped))


@router.get(
    "/metrics",
    summary="Prometheus text format",
    response_class=Response,
    responses={
        200: {
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/openmetrics-text": {"schema": {"type": "string"}},
            },
            "description": "Metrics, in OpenMetrics when the Accept header asks for it",
        }
    },
)
def metrics(request: Request, web: Web, session: ReadSession) -> Response:
    """OpenMetrics when the scraper asks for it (Prometheus does), else the classic text format."""
    now = web.now()
    registry = CollectorRegistry(auto_describe=False)
    data = queries.read_metrics(session, now, web.config.monitor.poll_interval)
    registry.register(DatabaseCollector(data, now))
    registry.register(Families(merged([*process_families(request.app), *web.peer_metrics()])))
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(registry), headers={"content-type": content_type})


def process_families(app: Any) -> list[Metric]:
    """This process's counters and histograms: `monitor.metrics`', the decisions' and the lane's."""
    return [
        *REGISTRY.collect(),
        *app.state.decision_point.counts.collect(),
        *app.state.decision_lane.collect(),
    ]


class Families:
    """Metric families collected already (a collector for a registry of one scrape)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        return self.families


@router.get("/api/v1/metrics", include_in_schema=False, response_class=Response)
def metrics_v1(request: Request, web: Web, session: ReadSession) -> Response:
    return metrics(request, web, session)
