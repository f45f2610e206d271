"""Servers imported from the JSON files hosts and editors keep theirs in (`[monitor] import`).

An entry that cannot be imported is skipped and reported by name; the others are imported.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from monitor.config.errors import ConfigError, explain
from monitor.config.servers import ServerConfig
from monitor.core.hostconfigs import jsonc_loads, read_host_config, rule_for


def import_mcp_servers(path: Path, source: str) -> tuple[list[ServerConfig], list[str]]:
    """Servers from a host's JSON config (Claude Desktop or Code, Cursor, VS Code, Windsurf, Gemini CLI).

    An entry that cannot be imported is skipped and reported by name; the others are imported.
    """
    where = f"{source}: import {str(path)!r}"
    try:
        data = jsonc_loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:  # json5's errors are ValueErrors
        raise ConfigError(f"{where}: not JSON: {exc}") from exc
    home = str(Path.home())
    resolved = path.resolve()
    rule = rule_for(resolved.as_posix(), home)
    folder = resolved.parent
    workspace = folder.parent if folder.name in (".vscode", ".cursor", ".gemini") else folder
    try:
        entries = read_host_config(data, rule=rule, workspace=str(workspace), home=home)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    problems = [f"{where}: {name!r} skipped: {reason}" for name, reason in entries.errors.items()]
    problems += [f"{where}: {name!r}: {why}" for name, why in entries.ignored.items()]
    servers = []
    for name, fields in entries.servers.items():
        try:
            servers.append(ServerConfig.model_validate({"name": name, **fields}))
        except ValidationError as exc:
            problems.append(f"{where}: {name!r} skipped: {explain(exc)}")
    return servers, problems
