"""Settings and the server registry: the TOML config file, `DRIFT_MONITOR_*` variables, mcpServers JSON.
The alert sinks' entries (`[[webhooks]]`) are `monitor.config.webhooks`.

Environment variables win over the file, so a deployment can override what a shared file says.
`${VAR}` in a server's url, headers, args or env is kept as written here and read from the
environment when the server becomes a poll target (`monitor.collect.targets`); the expanded values
are secrets and never leave the process (not in the database, not in logs, not in errors).
"""

from __future__ import annotations

import ipaddress
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from monitor.config.webhooks import WEBHOOK_SETTINGS, WebhookConfig
from monitor.core.clients import DEFAULT_PROFILE, ClientProfile, check_profiles
from monitor.core.hostconfigs import jsonc_loads, read_host_config
from monitor.core.hosts import HostPolicy, check_host_entry
from monitor.core.rules import Severity
from monitor.core.states import ApprovalMode
from monitor.identity.roles import Role

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A config problem, with the file, the server and the field it concerns in the message."""


def parse_duration(value: Any) -> float:
    """Seconds from `90`, `"90s"`, `"5m"`, `"1h30m"` or `"250ms"`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if "".join(number + unit for number, unit in parts) != text:
            raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 5m, 1h30m, 250ms)")
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    else:
        raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 5m, 1h30m, 250ms)")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
DurationOrOff = Annotated[
    float, BeforeValidator(lambda v: 0.0 if v in (0, "0", "off") else parse_duration(v))
]
"""A duration, or 0 (`"off"`): never."""
SERVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
Transport = Literal["http", "sse", "stdio"]


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME_PATTERN)
    transport: Transport
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_file: str | None = None
    """For transport "stdio": a dotenv file read when the server is polled (`env` wins over it), as
    VS Code's and Cursor's `envFile`."""
    cwd: str | None = None
    interval: Duration | None = None
    timeout: Duration | None = None
    era: Literal["handshake", "modern"] = "handshake"
    sse_fallback: bool = False
    """For transport "http": when the URL refuses Streamable HTTP with a 4xx, poll it over SSE, as
    hosts do with a bare `url` (set for such imported entries)."""
    approval: ApprovalMode = ApprovalMode.TOFU
    """What the decision point treats as approved (docs/contract.md section 10)."""
    aliases: list[str] = Field(default_factory=list)
    """Other names hosts know the server by (Claude Code's `mcp__<name>__tool`), for the hook adapters."""
    decision_max_age: Duration | None = None
    """How old the server's last good listing may be before decisions stop trusting it; default:
    `[decisions] max_age`, else three of its poll intervals."""
    client: list[ClientProfile] = Field(default_factory=lambda: [DEFAULT_PROFILE])
    """Who the monitor polls as: one profile (a table) or several (an array), each its own view."""

    @field_validator("client", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("client")
    @classmethod
    def _distinct_views(cls, profiles: list[ClientProfile]) -> list[ClientProfile]:
        return check_profiles(profiles)

    @model_validator(mode="after")
    def _transport_fields(self) -> ServerConfig:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError('command: required for transport "stdio"')
            if self.url or self.headers:
                raise ValueError('url, headers: not used by transport "stdio"')
        else:
            if self.env_file:
                raise ValueError(f'env_file: not used by transport "{self.transport}"')
            if not self.url:
                raise ValueError(f'url: required for transport "{self.transport}"')
            if not re.match(r"^(https?://|\$\{)", self.url):  # a leading ${VAR} is checked once expanded
                raise ValueError(f"url: must start with http:// or https:// (got {self.url!r})")
            if self.command or self.args:
                raise ValueError(f'command, args: not used by transport "{self.transport}"')
        return self


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


@dataclass
class Config:
    monitor: MonitorSettings
    servers: list[ServerConfig] = field(default_factory=list)
    webhooks: list[WebhookConfig] = field(default_factory=list)
    decisions: DecisionSettings = field(default_factory=DecisionSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    aliases: dict[str, list[str]] = field(default_factory=dict)
    """`[aliases]`: other names hosts know servers by, for any server (imported or registered over the
    API as well as `[[servers]]`), by the server's name."""
    source: str = "(defaults)"
    skipped: list[str] = field(default_factory=list)
    """Imported entries that could not be used, one line each naming the entry and why."""

    def server(self, name: str) -> ServerConfig:
        for server in self.servers:
            if server.name == name:
                return server
        raise ConfigError(f"{self.source}: no server named {name!r}")


def load_config(path: str | Path | None) -> Config:
    """The config file at `path`, or defaults and environment variables alone when None."""
    if path is None:
        return Config(monitor=_settings({}, "(environment)"), source="(environment)")
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"monitor", "servers", "webhooks", "decisions", "aliases", "auth"}
    if unknown:
        raise ConfigError(f"{source}: unknown section(s): {', '.join(sorted(unknown))}")
    monitor = _settings(_table(data, "monitor", source), source)
    servers = [
        _server(entry, f"{source}: servers[{i}]") for i, entry in enumerate(_array(data, "servers", source))
    ]
    skipped: list[str] = []
    imports = [monitor.import_] if isinstance(monitor.import_, str) else monitor.import_ or []
    defined = {server.name for server in servers}
    for host_file in imports:
        imported, problems = _import_mcp_servers(Path(path).parent / host_file, source)
        skipped += problems
        for server in imported:  # the config file's own table, or an earlier file, wins
            if server.name in defined:
                skipped.append(
                    f"{source}: import {host_file!r}: {server.name!r} skipped: already defined "
                    "(in [[servers]] or an earlier import)"
                )
            else:
                defined.add(server.name)
                servers.append(server)
    webhooks = [
        _webhook(entry, f"{source}: webhooks[{i}]")
        for i, entry in enumerate(_array(data, "webhooks", source))
    ]
    decisions = _model(DecisionSettings, data.get("decisions", {}), f"{source}: [decisions]")
    auth = _model(AuthSettings, data.get("auth", {}), f"{source}: [auth]")
    aliases = _aliases(_table(data, "aliases", source), source)
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ConfigError(f"{source}: server {server.name!r} is defined twice")
        seen.add(server.name)
    named = [*((server.name, server.aliases) for server in servers), *aliases.items()]
    for name, its_aliases in named:
        for alias in its_aliases:
            if alias in seen:
                raise ConfigError(
                    f"{source}: server {name!r}: alias {alias!r} is already the name or alias of a server"
                )
            seen.add(alias)
    return Config(
        monitor=monitor,
        servers=servers,
        webhooks=webhooks,
        decisions=decisions,
        auth=auth,
        aliases=aliases,
        source=source,
        skipped=skipped,
    )


def _aliases(table: dict[str, Any], source: str) -> dict[str, list[str]]:
    """`[aliases]`: a server name -> a list of other names, each a name a server could have."""
    pattern = re.compile(SERVER_NAME_PATTERN)
    aliases: dict[str, list[str]] = {}
    for name, value in table.items():
        if not isinstance(value, list) or not all(isinstance(alias, str) for alias in value):
            raise ConfigError(f"{source}: [aliases] {name}: must be a list of names")
        bad = [alias for alias in value if not pattern.match(alias) or len(alias) > 200]
        if bad:
            raise ConfigError(f"{source}: [aliases] {name}: not a server name: {bad[0]!r}")
        aliases[name] = list(value)
    return aliases


def _settings(values: dict[str, Any], source: str) -> MonitorSettings:
    try:
        return MonitorSettings(**values)
    except ValidationError as exc:
        raise ConfigError(f"{source}: [monitor] {_explain(exc)}") from None


def _table(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: [{key}] must be a table")
    return value


def _array(data: dict[str, Any], key: str, source: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ConfigError(f"{source}: {key} must be an array of tables ([[{key}]])")
    return value


def _server(entry: Any, where: str) -> ServerConfig:
    if isinstance(entry, dict) and isinstance(entry.get("name"), str):
        where = f"{where} ({entry['name']!r})"
    return _model(ServerConfig, entry, where)


def _webhook(entry: Any, where: str) -> WebhookConfig:
    kind = entry.get("format") if isinstance(entry, dict) else None
    return _model(
        WEBHOOK_SETTINGS.get(kind, WebhookConfig) if isinstance(kind, str) else WebhookConfig, entry, where
    )


def _model(model: type[M], entry: Any, where: str) -> M:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    try:
        return model.model_validate(entry)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_explain(exc)}") from None


def _explain(exc: ValidationError) -> str:
    """`field: problem` for each error; secrets are not echoed (pydantic's input values are dropped)."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        location = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def _import_mcp_servers(path: Path, source: str) -> tuple[list[ServerConfig], list[str]]:
    """Servers from a host's JSON config (Claude Desktop or Code, Cursor, VS Code, Windsurf, Gemini CLI).

    An entry that cannot be imported is skipped and reported by name; the others are imported.
    """
    where = f"{source}: import {str(path)!r}"
    try:
        data = jsonc_loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not JSON: {exc}") from exc
    folder = path.resolve().parent
    workspace = folder.parent if folder.name in (".vscode", ".cursor", ".gemini") else folder
    try:
        entries = read_host_config(
            data,
            workspace=str(workspace),
            home=str(Path.home()),
            folder=str(folder),
            bare_variables=folder.name in (".gemini", "gemini-cli"),  # Gemini CLI expands $VAR too
        )
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    problems = [f"{where}: {name!r} skipped: {reason}" for name, reason in entries.errors.items()]
    servers = []
    for name, fields in entries.servers.items():
        try:
            servers.append(ServerConfig.model_validate({"name": name, **fields}))
        except ValidationError as exc:
            problems.append(f"{where}: {name!r} skipped: {_explain(exc)}")
    return servers, problems
