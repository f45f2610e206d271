"""What every request handler shares: the store, the config, who is calling, the clock and the poller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client.core import Metric

from monitor.config import Config
from monitor.identity.callers import Identity
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store
from monitor.store.records import ServerRecord

PollNow = Callable[[str], Awaitable[PollOutcome]]
PeerMetrics = Callable[[], list[Metric]]


@dataclass
class WebContext:
    """Everything a request handler needs, kept on `app.state.web`."""

    store: Store
    config: Config
    token: str | None
    """The configured token (an admin, `api_token_name`), read from the variable `api_token_env` names."""
    poll_now: PollNow | None
    clock: Callable[[], datetime]
    alerting: Alerting
    """The alert policy session closes resolve alerts with (the service's, so its deliverer is woken)."""
    identity: Identity
    """Who a request is (`monitor.identity.callers`)."""
    peer_metrics: PeerMetrics
    """The counters and histograms of `serve`'s decision processes, which `/metrics` adds to this
    process's (`monitor.metrics.merged`)."""

    @property
    def token_env(self) -> str:
        return self.config.monitor.api_token_env

    @property
    def session_grace(self) -> timedelta:
        return timedelta(seconds=self.config.monitor.session_grace)

    def now(self) -> datetime:
        return self.clock()

    def as_of_now(self, server: ServerRecord) -> ServerRecord:
        """The server record with `overdue` as of now (docs/contract.md section 13)."""
        return server.as_of(self.now(), self.config.monitor.poll_interval)
