"""MCP Registry entries (`server.json`, and the pages of `GET /v0.1/servers`) as monitor servers.

Pure: it reads parsed JSON. A registry entry has `remotes` (servers already running somewhere,
over `streamable-http` or `sse`) and `packages` (npm, PyPI, OCI... run locally over stdio). Remotes
become http/sse servers; a header or URL `{variable}` becomes a `${VARIABLE}` placeholder (the
monitor never has the value: the operator's environment does). Packages are described as
`[[servers]]` TOML for a person to review, because running a package means running its code.

Accepted documents: one `server.json`, one page (`{"servers": [{"server": {...}, "_meta": ...}],
"metadata": {"nextCursor": ...}}`), or a list of either form. Read per the registry's server.json
schema, in its current camelCase and its earlier snake_case form: of several versions of one server,
the latest (`isLatest`, else the highest version); a `deleted` status (the registry's `_meta` or the
server's own) is not imported; URL and header `{variables}` take their `default`; packages keep their
runtime and package arguments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from monitor.core.hostconfigs import SERVER_NAME

_TEMPLATE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_-]*)\}")
_REMOTE_TYPES = {"streamable-http": "http", "http": "http", "sse": "sse"}
_RUNNERS = {
    "npm": ("npx", ["-y"]),
    "pypi": ("uvx", []),
    "oci": ("docker", ["run", "-i", "--rm"]),
    "nuget": ("dnx", []),
}
OFFICIAL = "io.modelcontextprotocol.registry/official"
"""The registry's own `_meta` key: `status`, `isLatest`, `publishedAt`, ..."""


def _get(mapping: Any, name: str, default: Any = None) -> Any:
    """A server.json field by its camelCase name, or by the snake_case name of earlier schemas."""
    if not isinstance(mapping, dict):
        return default
    if name in mapping:
        return mapping[name]
    return mapping.get(re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name), default)


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
    notes: dict[str, str] = field(default_factory=dict)
    """Imported all the same, but worth a line: a deprecated server, an older version left out."""


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
        servers = [_unwrapped(item) for item in page]
        metadata = document.get("metadata")
        cursor = metadata.get("nextCursor") if isinstance(metadata, dict) else None
        return servers, cursor if isinstance(cursor, str) and cursor else None
    if "server" in document and isinstance(document["server"], dict):
        return [document["server"]], None
    return [document], None


def _unwrapped(item: Any) -> Any:
    """A page item's server.json, with the registry's `_meta` (status, isLatest) merged into its own."""
    if not isinstance(item, dict) or not isinstance(item.get("server"), dict):
        return item
    server = dict(item["server"])
    if isinstance(item.get("_meta"), dict):
        server["_meta"] = {**(server.get("_meta") or {}), **item["_meta"]}
    return server


def _official(server: dict[str, Any]) -> dict[str, Any]:
    meta = server.get("_meta")
    official = meta.get(OFFICIAL) if isinstance(meta, dict) else None
    return official if isinstance(official, dict) else {}


def _version(server: dict[str, Any]) -> str:
    version = server.get("version") or _get(server.get("version_detail"), "version")
    return version if isinstance(version, str) else ""


def _version_key(version: str) -> tuple[tuple[int, ...], int, str]:
    """Semantic-version order: numbers compared as numbers, a pre-release before its release."""
    core, _, pre = version.partition("-")
    numbers = tuple(int(part) if part.isdigit() else -1 for part in core.split("."))
    return numbers, 0 if pre else 1, pre


def _latest(servers: list[Any], found: RegistryEntries) -> list[Any]:
    """One server.json per name: the one the registry marks `isLatest`, else the highest version."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    kept: list[Any] = []
    for server in servers:
        if isinstance(server, dict) and isinstance(server.get("name"), str):
            if server["name"] not in by_name:
                kept.append(server["name"])
            by_name.setdefault(server["name"], []).append(server)
        else:
            kept.append(server)
    result = []
    for item in kept:
        if not isinstance(item, str):
            result.append(item)
            continue
        versions = by_name[item]
        marked = [server for server in versions if _official(server).get("isLatest") is True]
        chosen = marked[-1] if marked else max(versions, key=lambda s: _version_key(_version(s)))
        if len(versions) > 1:
            found.notes[item] = f"version {_version(chosen) or '?'} taken, the latest of {len(versions)}"
        result.append(chosen)
    return result


def read_registry(servers: list[Any]) -> RegistryEntries:
    """The remotes and packages of registry `server.json` objects; a bad entry is reported by name."""
    found = RegistryEntries()
    for index, server in enumerate(_latest(servers, found)):
        label = (
            server.get("name") if isinstance(server, dict) and isinstance(server.get("name"), str) else None
        )
        label = label or f"servers[{index}]"
        try:
            if not isinstance(server, dict):
                raise ValueError("must be an object")
            status = _official(server).get("status") or server.get("status") or "active"
            if status == "deleted":
                raise ValueError("deleted from the registry: not imported")
            if status == "deprecated":
                found.notes[label] = "deprecated by its publisher; imported all the same"
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
    kind = str(remote.get("type") or remote.get("transport_type") or "").lower()
    if kind not in _REMOTE_TYPES:
        raise ValueError(f"remotes: type {kind!r} is not streamable-http or sse")
    variables: list[str] = []
    url = _placeholders(remote["url"], variables, remote.get("variables"))
    headers: dict[str, str] = {}
    for header in remote.get("headers") or []:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise ValueError("remotes: a header without a name")
        value = header.get("value") or header.get("default")
        if isinstance(value, str) and value:
            headers[header["name"]] = _placeholders(value, variables, header.get("variables"))
        elif _get(header, "isSecret") or _get(header, "isRequired"):
            variable = re.sub(r"[^A-Za-z0-9]", "_", header["name"]).upper()
            headers[header["name"]] = "${" + variable + "}"
            variables.append(variable)
    return RegistryRemote(name, registry_name, _REMOTE_TYPES[kind], url, headers, variables)


def _placeholders(text: str, variables: list[str], declared: Any = None) -> str:
    """`{name}` as its declared `default`, else as a `${NAME}` placeholder (added to `variables`)."""
    declared = declared if isinstance(declared, dict) else {}

    def replace(match: re.Match[str]) -> str:
        default = _get(declared.get(match.group(1)), "default")
        if isinstance(default, str | int | float) and not isinstance(default, bool) and str(default):
            return str(default)
        variable = match.group(1).replace("-", "_").upper()
        variables.append(variable)
        return "${" + variable + "}"

    return _TEMPLATE.sub(replace, text)


def _arguments(arguments: Any, unset: list[str]) -> list[str]:
    """Runtime or package arguments as a command line: `value`, else `default`, else (positional, or
    a required named one) a `${HINT}` placeholder a person fills in; `{variables}` likewise."""
    args: list[str] = []
    for argument in arguments if isinstance(arguments, list) else []:
        if not isinstance(argument, dict):
            raise ValueError("packages: an argument must be an object")
        value = _get(argument, "value") or _get(argument, "default")
        hint = _get(argument, "valueHint") or argument.get("name") or "value"
        if isinstance(value, str):
            value = _placeholders(value, unset, argument.get("variables"))
        elif argument.get("type") == "positional" or _get(argument, "isRequired"):
            variable = re.sub(r"[^A-Za-z0-9]", "_", str(hint)).strip("_").upper() or "VALUE"
            value = "${" + variable + "}"
            unset.append(variable)
        if argument.get("type") == "named":
            if not isinstance(argument.get("name"), str):
                raise ValueError("packages: a named argument without a name")
            args += [argument["name"], value] if value is not None else []
        elif value is not None:
            args.append(value)
    return args


def _package_toml(base: str, registry_name: str, package: Any) -> str:
    """A `[[servers]]` table for one package, commented with where it comes from, for review."""
    if not isinstance(package, dict) or not isinstance(package.get("identifier"), str):
        raise ValueError("packages: each needs an identifier")
    kind = str(_get(package, "registryType", "")).lower()
    identifier, version = package["identifier"], package.get("version")
    transport = package.get("transport", {})
    if isinstance(transport, dict) and transport.get("type", "stdio") != "stdio":
        over = transport.get("type")
        return f"# {registry_name}: {kind} package {identifier} runs over {over}: not a stdio server\n"
    if kind == "mcpb":
        return f"# {registry_name}: MCP bundle {identifier}: install it in a host that runs bundles\n"
    runner, args = _RUNNERS.get(kind, (_get(package, "runtimeHint") or "RUNNER", []))
    pinned = identifier
    if version and kind in ("npm", "nuget"):
        pinned = f"{identifier}@{version}"
    elif version and kind == "pypi":
        pinned = f"{identifier}=={version}"
    elif version and kind == "oci" and ":" not in identifier.rpartition("/")[2]:
        pinned = f"{identifier}:{version}"
    unset: list[str] = []
    runtime = _arguments(_get(package, "runtimeArguments"), unset)
    arguments = _arguments(_get(package, "packageArguments"), unset)
    if arguments and kind == "nuget":
        arguments = ["--", *arguments]  # dnx passes what follows `--` to the server
    env = {}
    for variable in _get(package, "environmentVariables") or []:
        if isinstance(variable, dict) and isinstance(variable.get("name"), str):
            default = variable.get("default")
            if isinstance(default, str) and default and not _get(variable, "isSecret"):
                env[variable["name"]] = default
            else:
                env[variable["name"]] = "${" + variable["name"] + "}"
    lines = [
        f"# {registry_name}: {kind} package {identifier}" + (f" {version}" if version else ""),
        "# Review before use: polling a stdio server runs this package's code.",
    ]
    if unset:
        lines.append(f"# Fill in: {', '.join(dict.fromkeys(unset))} (arguments the registry leaves to you)")
    lines += [
        "[[servers]]",
        f"name = {json.dumps(base + '-' + kind if kind else base)}",
        'transport = "stdio"',
        f"command = {json.dumps(runner)}",
        f"args = {json.dumps([*args, *runtime, pinned, *arguments])}",
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
