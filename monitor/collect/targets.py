"""From the config to the client: a server's poll target and the limits a poll of it runs under.

Here, not in `monitor.config`, so that the config knows nothing of the client (and the offline
commands, which read the config, never import the MCP SDK).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from monitor.collect.client import Limits, Target
from monitor.config import Config, ConfigError, MonitorSettings, ServerConfig
from monitor.core.clients import stored_profiles
from monitor.core.hostconfigs import parse_dotenv
from monitor.core.states import ServerOrigin
from monitor.store.models import Server

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
"""`${VAR}`, or `${VAR:-default}` (the default when VAR is unset or empty, as in a shell)."""


def limits_for(settings: MonitorSettings, server: ServerConfig | None = None) -> Limits:
    """The `[monitor]` limits, with the server's own timeout when it sets one."""
    timeout = server.timeout if server and server.timeout else settings.poll_timeout
    return Limits(
        timeout=timeout,
        max_pages=settings.max_pages,
        max_bytes=settings.max_listing_bytes,
        max_tools=settings.max_tools,
        allowed_hosts=tuple(settings.allowed_server_hosts),
    )


def target_for(config: Config, server: ServerConfig, environ: Mapping[str, str] | None = None) -> Target:
    """The config-file server, ready to poll: `${VAR}`s expanded from `environ` (default: the process's)."""
    env = os.environ if environ is None else environ
    where = f"{config.source}: server {server.name!r}"
    expanded: list[str] = []

    def expand(value: str, what: str) -> str:
        def lookup(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if default is not None and not env.get(name):
                return default
            if name not in env:
                raise ConfigError(f"{where}: {what}: environment variable {name} is not set")
            expanded.append(env[name])
            return env[name]

        return _VAR.sub(lookup, value)

    url = expand(server.url, "url") if server.url else None
    if url is not None and not re.match(r"^https?://", url):
        raise ConfigError(f"{where}: url: must start with http:// or https:// once expanded")
    variables: dict[str, str] = {}
    if server.env_file:
        path = expand(server.env_file, "env_file")
        try:
            variables = parse_dotenv(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{where}: env_file: cannot read {path!r}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"{where}: env_file {path!r}: {exc}") from None
        expanded.extend(value for value in variables.values() if value)  # secrets, like expanded ones
    variables.update({key: expand(value, f"env.{key}") for key, value in server.env.items()})
    return Target(
        name=server.name,
        transport=server.transport,
        url=url,
        headers={key: expand(value, f"headers.{key}") for key, value in server.headers.items()},
        command=server.command,
        args=tuple(expand(arg, "args") for arg in server.args),
        env=variables or None,
        cwd=server.cwd,
        era=server.era,
        sse_fallback=server.sse_fallback,
        secrets=tuple(expanded),
        origin=ServerOrigin.CONFIG,
        client=server.client[0],
        views=tuple(server.client[1:]),
    )


def resolve_targets(
    config: Config, servers: Iterable[ServerConfig], environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Target], list[str]]:
    """The poll target of each server that can be resolved, by name, and one line for each that cannot
    (an unset variable, an unreadable env_file, a URL that is none once expanded): that server is
    skipped, everything else is monitored."""
    targets: dict[str, Target] = {}
    skipped: list[str] = []
    for server in servers:
        try:
            targets[server.name] = target_for(config, server, environ)
        except ConfigError as exc:
            skipped.append(f"{exc}; not polled")
    return targets, skipped


def api_target(server: Server) -> Target | None:
    """The poll target of a server registered over the API or from the MCP Registry (its row holds
    all it needs); None for any other."""
    if server.origin != ServerOrigin.API or not server.url:
        return None
    transport: Literal["http", "sse"] = "sse" if server.transport == "sse" else "http"
    era: Literal["handshake", "modern"] = "modern" if server.era == "modern" else "handshake"
    profiles = stored_profiles(server.client)
    return Target(
        name=server.name,
        transport=transport,
        url=server.url,
        headers=server.headers or {},
        era=era,
        client=profiles[0],
        views=tuple(profiles[1:]),
    )
