"""From the config to the client: a server's poll target and the limits a poll of it runs under.

Here, not in `monitor.config`, so that the config knows nothing of the client (and the offline
commands, which read the config, never import the MCP SDK).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from monitor.collect.client import Limits, Target
from monitor.config import Config, ConfigError, MonitorSettings, ServerConfig
from monitor.core.states import ServerOrigin

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
    return Target(
        name=server.name,
        transport=server.transport,
        url=url,
        headers={key: expand(value, f"headers.{key}") for key, value in server.headers.items()},
        command=server.command,
        args=tuple(expand(arg, "args") for arg in server.args),
        env={key: expand(value, f"env.{key}") for key, value in server.env.items()} or None,
        cwd=server.cwd,
        era=server.era,
        sse_fallback=server.sse_fallback,
        secrets=tuple(expanded),
        origin=ServerOrigin.CONFIG,
        client=server.client[0],
        views=tuple(server.client[1:]),
    )
