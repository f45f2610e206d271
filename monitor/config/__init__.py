"""Settings and the server registry: the TOML config file, `DRIFT_MONITOR_*` variables, mcpServers JSON.

The file is validated as a whole against pydantic models, so an unknown section or key, or a bad
value, is one line naming the file, the entry and the key (`monitor.config.errors`). The sections'
models are in this package: `[monitor]`, `[decisions]`, `[auth]` and `[tracing]` in `settings`, `[[servers]]`
in `servers`; `[[webhooks]]` entries are each sink's own settings (`monitor.sinks.WebhookEntry`).
Environment variables win over the file's `[monitor]`, so a deployment can override what a shared
file says.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from monitor.config.durations import Duration, DurationOrOff, parse_duration
from monitor.config.errors import ConfigError, explain
from monitor.config.imports import import_mcp_servers
from monitor.config.servers import SERVER_NAME_PATTERN, ServerConfig, Transport
from monitor.config.settings import AuthSettings, DecisionSettings, MonitorSettings, TracingSettings
from monitor.sinks import WebhookEntry

ServerName = Annotated[str, StringConstraints(pattern=SERVER_NAME_PATTERN, max_length=200)]


class Sections(BaseModel):
    """The sections of the config file other than `[monitor]` (read as settings, with the environment)."""

    model_config = ConfigDict(extra="forbid")

    servers: list[ServerConfig] = Field(default_factory=list)
    webhooks: list[WebhookEntry] = Field(default_factory=list)
    decisions: DecisionSettings = Field(default_factory=DecisionSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    aliases: dict[str, list[ServerName]] = Field(default_factory=dict)
    """`[aliases]`: other names hosts know servers by, for any server (imported or registered over the
    API as well as `[[servers]]`), by the server's name."""


class Config(Sections):
    """What the monitor runs with: the file's sections, `[monitor]` with the environment's overrides,
    and the servers imported from host files."""

    monitor: MonitorSettings
    source: str = "(defaults)"
    skipped: list[str] = Field(default_factory=list)
    """Imported entries that could not be used, one line each naming the entry and why."""

    def server(self, name: str) -> ServerConfig:
        for server in self.servers:
            if server.name == name:
                return server
        raise ConfigError(f"{self.source}: no server named {name!r}")


class _File(Sections):
    monitor: dict[str, Any] = Field(default_factory=dict)


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
    try:
        sections = _File.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {explain(exc, data)}") from None
    monitor = _settings(sections.monitor, source)
    servers = list(sections.servers)
    skipped: list[str] = []
    imports = [monitor.import_] if isinstance(monitor.import_, str) else monitor.import_ or []
    defined = {server.name for server in servers}
    for host_file in imports:
        imported, problems = import_mcp_servers(Path(path).parent / host_file, source)
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
    _check_names(servers, sections.aliases, source)
    return Config(
        monitor=monitor,
        servers=servers,
        webhooks=sections.webhooks,
        decisions=sections.decisions,
        auth=sections.auth,
        tracing=sections.tracing,
        aliases=sections.aliases,
        source=source,
        skipped=skipped,
    )


def _check_names(servers: list[ServerConfig], aliases: dict[str, list[str]], source: str) -> None:
    """Every name and alias names one server only."""
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


def _settings(values: dict[str, Any], source: str) -> MonitorSettings:
    try:
        return MonitorSettings(**values)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {explain(exc, section='monitor')}") from None


__all__ = [
    "SERVER_NAME_PATTERN",
    "AuthSettings",
    "Config",
    "ConfigError",
    "DecisionSettings",
    "Duration",
    "DurationOrOff",
    "MonitorSettings",
    "ServerConfig",
    "TracingSettings",
    "Transport",
    "load_config",
    "parse_duration",
]
