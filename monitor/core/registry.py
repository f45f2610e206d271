"""MCP Registry entries (`server.json`, and the pages of `GET /v0.1/servers`) as monitor servers.

Pure: it reads parsed JSON. A registry entry has `remotes` (servers already running somewhere,
over `streamable-http` or `sse`) and `packages` (npm, PyPI, OCI... run locally over stdio). Remotes
become http/sse servers; a header or URL `{variable}` becomes a `${VARIABLE}` placeholder (the
monitor never has the value: the operator's environment does). Packages are described as
`[[servers]]` TOML for a person to review, because running a package means running its code.

Accepted documents: one `server.json`, one page (`{"servers": [{"server": {...}, "_meta": ...}],
"metadata": {"nextCursor": ...}}`), or a list of either form.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from monitor.core.hostconfigs import SERVER_NAME

_TEMPLATE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")
_REMOTE_TYPES = {"streamable-http": "http", "http": "http", "sse": "sse"}
_RUNNERS = {"npm": ("npx", ["-y"]), "pypi": ("uvx", []), "oci": ("docker", ["run", "-i", "--rm"])}


@dataclass
class RegistryRemote:
    name: str
    """A monitor server name: the registry name with characters outside [A-Za-z0-9._-] as '-'."""
    registry_name: str
    transport: str
    url: str
    headers: dict[str, str]
    variables: list[str]
    """Every `${VAR}` the url and headers use, in order."""


@dataclass
class RegistryEntries:
    remotes: list[RegistryRemote] = field(default_factory=list)
    packages_toml: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def registry_page(document: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The server.json objects of one document, and the next page's cursor (None: the last page)."""
    if isinstance(document, list):
        servers: list[dict[str, Any]] = []
        for item in document:
            servers += registry_page(item)[0]
        return servers, None
    if not isinstance(document, dict):
        raise ValueError("not a server.json object or a registry page")
    if "servers" in document:
        page = document["servers"]
        if not isinstance(page, list):
            raise ValueError("'servers' must be an array")
        servers = [item["server"] if isinstance(item, dict) and "server" in item else item for item in page]
        metadata = document.get("metadata")
        cursor = metadata.get("nextCursor") if isinstance(metadata, dict) else None
        return servers, cursor if isinstance(cursor, str) and cursor else None
    if "server" in document and isinstance(document["server"], dict):
        return [document["server"]], None
    return [document], None


def read_registry(servers: list[Any]) -> RegistryEntries:
    """The remotes and packages of registry `server.json` objects; a bad entry is reported by name."""
    found = RegistryEntries()
    for index, server in enumerate(servers):
        label = (
            server.get("name") if isinstance(server, dict) and isinstance(server.get("name"), str) else None
        )
        label = label or f"servers[{index}]"
        try:
            if not isinstance(server, dict):
                raise ValueError("must be an object")
            remotes = server.get("remotes") or []
            packages = server.get("packages") or []
            if not remotes and not packages:
                raise ValueError("has neither remotes nor packages")
            base = _monitor_name(label)
            for position, remote in enumerate(remotes):
                suffix = "" if len(remotes) == 1 else f"-{position + 1}"
                found.remotes.append(_remote(base + suffix, label, remote))
            found.packages_toml += [_package_toml(base, label, package) for package in packages]
        except ValueError as exc:
            found.errors[label] = str(exc)
    return found


def _monitor_name(registry_name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", registry_name).strip("-._")[:200]
    if not SERVER_NAME.fullmatch(name):
        raise ValueError("name: nothing usable as a server name")
    return name


def _remote(name: str, registry_name: str, remote: Any) -> RegistryRemote:
    if not isinstance(remote, dict) or not isinstance(remote.get("url"), str):
        raise ValueError("remotes: each needs a url")
    kind = str(remote.get("type", "")).lower()
    if kind not in _REMOTE_TYPES:
        raise ValueError(f"remotes: type {kind!r} is not streamable-http or sse")
    variables: list[str] = []
    url = _placeholders(remote["url"], variables)
    headers: dict[str, str] = {}
    for header in remote.get("headers") or []:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise ValueError("remotes: a header without a name")
        value = header.get("value")
        if isinstance(value, str) and value:
            headers[header["name"]] = _placeholders(value, variables)
        elif header.get("isSecret") or header.get("isRequired"):
            variable = re.sub(r"[^A-Za-z0-9]", "_", header["name"]).upper()
            headers[header["name"]] = "${" + variable + "}"
            variables.append(variable)
    return RegistryRemote(name, registry_name, _REMOTE_TYPES[kind], url, headers, variables)


def _placeholders(text: str, variables: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        variable = match.group(1).replace("-", "_").upper()
        variables.append(variable)
        return "${" + variable + "}"

    return _TEMPLATE.sub(replace, text)


def _package_toml(base: str, registry_name: str, package: Any) -> str:
    """A `[[servers]]` table for one package, commented with where it comes from, for review."""
    if not isinstance(package, dict) or not isinstance(package.get("identifier"), str):
        raise ValueError("packages: each needs an identifier")
    kind = str(package.get("registryType", "")).lower()
    identifier, version = package["identifier"], package.get("version")
    transport = package.get("transport", {})
    if isinstance(transport, dict) and transport.get("type", "stdio") != "stdio":
        over = transport.get("type")
        return f"# {registry_name}: {kind} package {identifier} runs over {over}: not a stdio server\n"
    runner, args = _RUNNERS.get(kind, (package.get("runtimeHint") or "RUNNER", []))
    pinned = identifier
    if version and kind == "npm":
        pinned = f"{identifier}@{version}"
    elif version and kind == "pypi":
        pinned = f"{identifier}=={version}"
    elif version and kind == "oci" and ":" not in identifier.rpartition("/")[2]:
        pinned = f"{identifier}:{version}"
    env = {
        variable["name"]: "${" + variable["name"] + "}"
        for variable in package.get("environmentVariables") or []
        if isinstance(variable, dict) and isinstance(variable.get("name"), str)
    }
    lines = [
        f"# {registry_name}: {kind} package {identifier}" + (f" {version}" if version else ""),
        "# Review before use: polling a stdio server runs this package's code.",
        "[[servers]]",
        f"name = {json.dumps(base + '-' + kind if kind else base)}",
        'transport = "stdio"',
        f"command = {json.dumps(runner)}",
        f"args = {json.dumps([*args, pinned])}",
    ]
    if env:
        lines.append(
            "env = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in env.items()) + " }"
        )
    return "\n".join(lines) + "\n"


def remote_toml(remote: RegistryRemote) -> str:
    """A `[[servers]]` table for a remote, its secrets as `${VAR}` placeholders."""
    lines = [
        f"# {remote.registry_name}",
        "[[servers]]",
        f"name = {json.dumps(remote.name)}",
        f"transport = {json.dumps(remote.transport)}",
        f"url = {json.dumps(remote.url)}",
    ]
    if remote.headers:
        pairs = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in remote.headers.items())
        lines.append("headers = { " + pairs + " }")
    return "\n".join(lines) + "\n"
