"""`[monitor]`, `[decisions]`, `[auth]` and `[tracing]`: how the service runs, answers hosts, signs people
in and shows its work to tracing systems.

`[monitor]` is pydantic-settings: each field can be overridden by `DRIFT_MONITOR_<FIELD>`, and
environment variables win over the file, so a deployment can override what a shared file says.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from monitor.config.durations import Duration, DurationOrOff
from monitor.core.findings import Severity
from monitor.core.hosts import HostPolicy, check_host_entry
from monitor.core.roles import DEFAULT_TOKEN_NAME, Role


class MonitorSettings(BaseSettings):
    """`[monitor]` of the config file; each field can be overridden by `DRIFT_MONITOR_<FIELD>`."""

    model_config = SettingsConfigDict(env_prefix="DRIFT_MONITOR_", extra="forbid", populate_by_name=True)

    database_url: str = "sqlite:///drift-monitor.db"
    poll_interval: Duration = 60.0
    poll_timeout: Duration = 30.0
    poll_concurrency: int = Field(default=32, ge=1, le=1024)
    suspect_poll_concurrency: int = Field(default=32, ge=1, le=1024)
    """Concurrent polls of servers not known to answer (never polled, or failing), a budget apart from
    `poll_concurrency`: servers that hang until their timeout cannot delay the ones that answer."""
    heavy_poll_concurrency: int = Field(default=4, ge=1, le=1024)
    """Concurrent polls of servers whose last poll here was slow (over `heavy_poll_seconds`) or big (a
    listing over `heavy_listing_bytes`, or refused as over `max_listing_bytes`): a third budget, so
    slow or huge answers cannot take the slots, or the loop's time, of servers that answer quickly."""
    heavy_poll_seconds: Duration = Field(default=4.0, gt=0)
    heavy_listing_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    list_changed_min_gap: Duration = 5.0
    """Shortest time between two polls of one server that list-changed notifications cause: a storm
    of notifications is one pending re-poll, taken at most this often."""
    max_pages: int = Field(default=100, ge=1)
    max_listing_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_tools: int = Field(default=10_000, ge=1)
    unreachable_after: int = Field(default=3, ge=1)
    attempts_kept: int = Field(default=100, ge=1)
    session_grace: Duration = 300.0
    """How long a host session may hold an older listing than the server's before it is stale."""
    session_max_age: Duration = 8 * 3600.0
    session_check_interval: Duration = 15.0
    identity_check_interval: DurationOrOff = 3600.0
    """How often each server is also polled under the monitor's own name (clientInfo and User-Agent),
    beside its client profiles, to catch a server that tells the monitor from hosts (0 or "off": never)."""
    session_expiry: Duration = 900.0
    """A host session that has not heart-beaten for this long is forgotten."""
    flapping_returns: int = Field(default=3, ge=1)
    flapping_window: Duration = 3600.0
    """`listing-flapping`: this many returns to an earlier listing within this window."""
    alert_min_severity: Severity = Severity.HIGH
    """Findings at or above this (or any webhook's min_severity, if lower) open alerts."""
    alert_repost_interval: Duration = 60.0
    """How often `serve` re-posts the open alerts to each Alertmanager sink."""
    public_url: str = "http://127.0.0.1:8000"
    """Where the dashboard is reachable, for links in webhook payloads."""
    api_token_env: str = "DRIFT_MONITOR_API_TOKEN"  # noqa: S105 - the variable's name, not a token
    api_token_name: str = Field(default=DEFAULT_TOKEN_NAME, min_length=1, max_length=200)
    """Who the configured token is: the name shown to whoever signs in with it and recorded as the
    actor of what it changes (the audit log, alerts, approvals, webhooks). Records made before this
    setting existed keep the name they were made under, `config`."""
    import_: str | list[str] | None = Field(default=None, alias="import")
    """Host files to import servers from (docs/integrations.md): one path or several."""
    allowed_server_hosts: list[str] = Field(default_factory=list)
    """Where servers registered over the API may be: host names, `*.domain` wildcards, IP addresses
    or CIDR networks. Empty: anywhere but link-local, cloud metadata and reserved addresses
    (see `HostPolicy`). Config-file servers are not restricted."""
    max_request_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """Largest request body the web app reads (a host session report carries a whole listing); 413 above."""
    decisions_kept: int = Field(default=1000, ge=1)
    """Non-allow decisions kept per server for review; older ones are trimmed (and pruned by age)."""

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        """SQLite or PostgreSQL through psycopg, said up front rather than as a missing driver module."""
        scheme, separator, rest = url.partition("://")
        if not separator:
            raise ValueError("not a database URL (use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)")
        if scheme in ("postgres", "postgresql"):  # SQLAlchemy's default PostgreSQL driver is not installed
            return f"postgresql+psycopg://{rest}"
        if scheme not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
            raise ValueError(
                f"unsupported database {scheme!r}: use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
            )
        return url

    @field_validator("api_token_name")
    @classmethod
    def _token_name(cls, name: str) -> str:
        """A name a person reads as someone: printable and not blank, its surrounding space cut."""
        name = name.strip()
        if not name or not name.isprintable():
            raise ValueError("a name of printable characters, not empty")
        return name

    @field_validator("allowed_server_hosts")
    @classmethod
    def _host_entries(cls, entries: list[str]) -> list[str]:
        return [check_host_entry(entry) for entry in entries]

    @property
    def host_policy(self) -> HostPolicy:
        return HostPolicy(tuple(self.allowed_server_hosts))

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return env_settings, init_settings


class DecisionSettings(BaseModel):
    """`[decisions]`: how the decision point answers hosts (docs/approvals.md)."""

    model_config = ConfigDict(extra="forbid")

    hook_allow_approved: bool = False
    """Answer an approved, unchanged tool with an explicit `allow` in host hooks where `allow` skips the
    host's own prompt (Claude Code). Off: no opinion, so the host asks as it would without the hook."""
    unmonitored: Literal["none", "ask", "deny"] = "none"
    """The answer about a server the monitor does not know: no opinion (the host decides), ask or deny.
    Either way the call is counted and the name listed on the sessions page."""
    stale_decision: Literal["ask", "deny"] = "ask"
    """At least this, for a server whose last good listing is older than its `decision_max_age`."""
    max_age: Duration | None = Field(default=None, gt=0)
    """How old a server's last good listing may be before decisions stop trusting it; default three
    of the server's poll intervals. A server may set its own (`decision_max_age`)."""
    refresh_on_decision: Duration | None = Field(default=None, gt=0)
    """Optional: a decision about a server last polled longer ago than this polls it first (at most
    once per this interval per server, waiting at most `refresh_wait`)."""
    refresh_wait: Duration = Field(default=2.0, gt=0, le=30)
    at_once: int = Field(default=32, ge=1, le=256)
    max_waiting: int = Field(default=5000, ge=0)
    max_wait: Duration = Field(default=0.4, gt=0, le=4)
    """Decision requests (host hooks, the decision API) are decided `at_once` at a time; the others
    wait, at most `max_waiting` of them, each at most `max_wait` seconds for its turn, then it is
    answered without deciding: a hook's `stale_decision` (never allow), the
    API's 503 (`monitor.approvals.lane`)."""
    fast_path: bool = True
    """Answer host hooks and the decision API ahead of the app's routing, from the decision cache on
    the event loop (`monitor.approvals.fastpath`, docs/approvals.md "The decision path"); off: through
    the app's routes and the lane's threads, with the same answers at many times the CPU."""
    listen: str | None = None
    """`HOST:PORT` where `serve` also answers host hooks, the ToolHive PDP, the decision API,
    `/healthz` and `/metrics` from a process of its own, so that polling and pages never share its
    CPU (docs/approvals.md, "Under load"); off when unset."""
    processes: int = Field(default=2, ge=1, le=16)
    """How many processes answer on `listen`, each taking connections as it is free."""
    agentgateway_listen: str | None = None
    """`HOST:PORT` where `serve` answers agentgateway's MCP guardrails (ExtMcp over cleartext gRPC,
    docs/integrations.md); off when unset."""

    @field_validator("listen", "agentgateway_listen")
    @classmethod
    def _listen_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{value!r}: use HOST:PORT, for example 127.0.0.1:9091 or [::1]:9091")
        return value


class AuthSettings(BaseModel):
    """`[auth]`: dashboard sign-in behind a trusted authenticating proxy (docs/security.md), in the
    convention of oauth2-proxy and Grafana's auth proxy."""

    model_config = ConfigDict(extra="forbid")

    proxy_header: str | None = None
    """The header the proxy names the signed-in person in (e.g. `X-Forwarded-Email`)."""
    proxy_groups_header: str | None = None
    """A header with the person's groups, comma-separated (e.g. `X-Forwarded-Groups`)."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Where the proxy connects from (CIDRs): the header is believed only from there."""
    users: dict[str, Role] = Field(default_factory=dict)
    """A person's role, by the name the proxy gives."""
    groups: dict[str, Role] = Field(default_factory=dict)
    """A role for everyone in a group; a person in several gets the highest."""
    default_role: Role | None = None
    """The role of a person the proxy signed in but no `users` or `groups` entry names (None: refused)."""
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    """How long a sign-in with a token lasts."""

    @model_validator(mode="after")
    def _proxies(self) -> AuthSettings:
        if self.proxy_header and not self.trusted_proxies:
            raise ValueError("trusted_proxies: required with proxy_header (where the proxy connects from)")
        for network in self.trusted_proxies:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {network!r} is not an address or CIDR network") from None
        return self


class TracingSettings(BaseModel):
    """`[tracing]`: OpenTelemetry spans of polls and decisions, sent over OTLP/HTTP (docs/running.md,
    "Tracing"; the `tracing` extra). The OpenTelemetry SDK's own variables win over these, as the
    environment wins over the file everywhere: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    `OTEL_EXPORTER_OTLP_ENDPOINT` over `otlp_endpoint`, `OTEL_SERVICE_NAME` over `service_name`."""

    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = None
    """The collector's OTLP/HTTP base URL (e.g. `http://collector:4318`; spans go to its `/v1/traces`).
    Unset, and no endpoint in the environment: no tracing at all."""
    service_name: str = Field(default="drift-monitor", min_length=1, max_length=200)

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, url: str | None) -> str | None:
        if url is None:
            return None
        scheme, separator, rest = url.partition("://")
        if not separator or scheme not in ("http", "https") or not rest.strip("/"):
            raise ValueError("not an http:// or https:// URL (for example http://127.0.0.1:4318)")
        return url
