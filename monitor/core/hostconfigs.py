"""Server entries from the JSON files hosts and editors keep their MCP servers in.

Pure: it reads parsed JSON and returns, per entry, the fields of a `[[servers]]` table or the
reason the entry cannot be imported, so one bad entry never costs the others. The shapes:

- Claude Desktop, Claude Code, Cursor, Windsurf, Gemini CLI: `{"mcpServers": {name: entry}}`;
- VS Code (`.vscode/mcp.json`): `{"inputs": [...], "servers": {name: entry}}`.

Files are read as JSONC, as VS Code writes them (`//` and `/* */` comments, trailing commas); strict
JSON is a subset. An entry is stdio (`command`, `args`, `env`, `envFile`, `cwd`) or remote: `url`
with `type` ("http", "streamable-http", "sse") or without it (Streamable HTTP, falling back to SSE
as hosts do), Windsurf's `serverUrl` (the same), Gemini's `httpUrl` (Streamable HTTP).
`disabled: true` skips an entry. Each host starts a stdio server in a folder of its own choosing
and takes a relative `cwd` from it, or ignores `cwd`: `HostRule` says which (`rule_for` tells the
host by the file's name and folder), and the monitor starts the server there too. Variables are
rewritten into the monitor's `${VAR}` form, expanded only when the server is polled: `${env:X}` ->
`${X}`, VS Code's `${input:id}` -> `${DRIFT_MONITOR_INPUT_ID}` (the monitor cannot prompt, so the
value comes from that environment variable), `${X:-default}` kept as is;
`${workspaceFolder}` and `${userHome}` are filled in at once (they are not secrets). Gemini CLI
also expands a bare `$VAR` in its settings, so its files have that form rewritten too.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import json5

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?$")
_REMOTE_TYPES = {"http": "http", "streamable-http": "http", "streamablehttp": "http", "sse": "sse"}
_BARE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def jsonc_loads(text: str) -> Any:
    """JSON with comments and trailing commas (VS Code's JSONC), parsed by json5, whose grammar is a
    superset of it; a `ValueError` naming the line and column when it is not."""
    return json5.loads(text)


@dataclass(frozen=True)
class HostRule:
    """How one host starts a stdio server of its config file, from its own sources and docs
    (docs/integrations.md has each with its source)."""

    host: str
    base: str
    """The folder a server starts in when its entry names none, and a relative `cwd` (and `envFile`)
    is taken from: the host's working folder for that file, given the file's path."""
    cwd: bool = True
    """Whether the host honours `cwd` (Claude Code ignores it: the server starts in `base`)."""
    env_file: bool = False
    """Whether the host reads `envFile` (VS Code, Cursor)."""
    bare_variables: bool = False
    """Whether the host also expands `$VAR` (Gemini CLI)."""


def rule_for(path: str, home: str) -> HostRule:
    """The host whose config file `path` (absolute) is, by its name and folder:

    - `.gemini/settings.json`: Gemini CLI, which starts servers where it was launched (the folder
      holding `.gemini/`) and passes a relative `cwd` to the process as it is, so from there too;
    - `.vscode/mcp.json`: VS Code, `cwd` joined to the workspace folder (the one holding `.vscode/`),
      which is also where servers start without one; `envFile` read;
    - `.cursor/mcp.json`: Cursor, the same (the project root, or home for `~/.cursor/mcp.json`);
    - `.mcp.json`, `~/.claude.json`: Claude Code, which ignores `cwd` and starts servers in the
      project root (the file's folder; home for the user's file);
    - `claude_desktop_config.json`, Windsurf's `mcp_config.json`: the user's home;
    - any other file: its own folder.
    """
    folder = posixpath.dirname(path)
    name, parent = posixpath.basename(path), posixpath.basename(folder)
    workspace = posixpath.dirname(folder)
    if parent in (".gemini", "gemini-cli"):
        return HostRule("Gemini CLI", workspace, bare_variables=True)
    if parent == ".vscode":
        return HostRule("VS Code", workspace, env_file=True)
    if parent == ".cursor":
        return HostRule("Cursor", workspace, env_file=True)
    if name in (".mcp.json", ".claude.json"):
        return HostRule("Claude Code", folder, cwd=False)
    if name == "claude_desktop_config.json":
        return HostRule("Claude Desktop", home, cwd=False)
    if name == "mcp_config.json" and parent in ("windsurf", "devin"):
        return HostRule("Windsurf", home, cwd=False)
    return HostRule("a host", folder, env_file=True)


@dataclass
class HostEntries:
    """What one file holds: each importable entry's server fields, each bad one's reason, the skipped."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    disabled: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)
    """Fields of an imported entry its host does not honour, so neither does the monitor: name -> why."""


def input_variable(input_id: str) -> str:
    """The environment variable a VS Code `${input:id}` is read from."""
    return "DRIFT_MONITOR_INPUT_" + re.sub(r"[^A-Za-z0-9]", "_", input_id).upper()


def read_host_config(data: Any, *, rule: HostRule, workspace: str, home: str) -> HostEntries:
    """The servers of a host's config file (already parsed JSON), each stdio server starting where
    `rule` says its host starts it. Raises ValueError when the file holds no server map at all;
    problems with single entries are reported in `HostEntries.errors` by name.
    """
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    servers = data.get("mcpServers", data.get("servers"))
    if not isinstance(servers, dict):
        raise ValueError("no 'mcpServers' (Claude, Cursor, Windsurf, Gemini) or 'servers' (VS Code) object")
    inputs = _input_ids(data.get("inputs"))
    found = HostEntries()
    for name, entry in servers.items():
        if isinstance(entry, dict) and entry.get("disabled") is True:
            found.disabled.append(name)
            continue
        try:
            fields = _entry(name, entry)
            if rule.bare_variables:
                fields = _strings_map(fields, lambda text: _BARE.sub(r"${\1}", text))
            fields = _rewrite(fields, inputs, workspace=workspace, home=home)
            found.servers[name] = _started_as(fields, rule, name, found.ignored)
        except ValueError as exc:
            found.errors[name] = str(exc)
    return found


def _input_ids(inputs: Any) -> set[str]:
    if not isinstance(inputs, list):
        return set()
    return {item["id"] for item in inputs if isinstance(item, dict) and isinstance(item.get("id"), str)}


def _entry(name: str, entry: Any) -> dict[str, Any]:
    if not SERVER_NAME.fullmatch(name) or len(name) > 200:
        raise ValueError("name: use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    if not isinstance(entry, dict):
        raise ValueError("must be an object")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    url = _first(entry, "httpUrl", "serverUrl", "url")
    if url is not None:
        if not isinstance(url, str):
            raise ValueError("url: must be a string")
        if "httpUrl" in entry:
            transport, fallback = "http", False
        elif kind:
            if kind not in _REMOTE_TYPES:
                raise ValueError(f"type: {kind!r} is not a remote transport (http, sse)")
            transport, fallback = _REMOTE_TYPES[kind], False
        else:
            transport, fallback = "http", True
        fields: dict[str, Any] = {"transport": transport, "url": url, "sse_fallback": fallback}
        if "headers" in entry:
            fields["headers"] = _strings(entry["headers"], "headers")
        return fields
    if kind not in ("", "stdio"):
        raise ValueError(f"type: {kind!r} needs a url")
    if not isinstance(entry.get("command"), str) or not entry["command"]:
        raise ValueError("command or url: one is required")
    fields = {"transport": "stdio", "command": entry["command"]}
    if "args" in entry:
        args = entry["args"]
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise ValueError("args: must be an array of strings")
        fields["args"] = list(args)
    if "env" in entry:
        fields["env"] = _strings(entry["env"], "env")
    for key, field_name in (("cwd", "cwd"), ("envFile", "env_file")):
        if key in entry:
            if not isinstance(entry[key], str) or not entry[key]:
                raise ValueError(f"{key}: must be a path")
            fields[field_name] = entry[key]
    return fields


def _strings_map(fields: dict[str, Any], change: Any) -> dict[str, Any]:
    """`fields` with `change` applied to every string in it (values of lists and maps included)."""
    result: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, str):
            result[key] = change(value)
        elif isinstance(value, list):
            result[key] = [change(item) if isinstance(item, str) else item for item in value]
        elif isinstance(value, dict):
            result[key] = {k: change(v) if isinstance(v, str) else v for k, v in value.items()}
        else:
            result[key] = value
    return result


def _started_as(fields: dict[str, Any], rule: HostRule, name: str, ignored: dict[str, str]) -> dict[str, Any]:
    """A stdio entry with the folder its host starts it in (`rule.base`, or its `cwd` from there) and
    its `envFile` from there, made absolute (not wherever the monitor runs); a value that starts with
    a variable is left for the poll to expand. A field the host ignores is dropped, and named."""
    if fields.get("transport") != "stdio":
        return fields
    dropped = [
        key
        for key, honoured in (("cwd", rule.cwd), ("env_file", rule.env_file))
        if key in fields and not honoured
    ]
    for key in dropped:
        del fields[key]
    if dropped:
        ignored[name] = (
            f"{', '.join('envFile' if k == 'env_file' else k for k in dropped)} ignored, as {rule.host} does"
        )
    fields.setdefault("cwd", rule.base)
    for key in ("cwd", "env_file"):
        value = fields.get(key)
        if isinstance(value, str) and not value.startswith(("/", "${", "~")):
            fields[key] = posixpath.normpath(posixpath.join(rule.base, value))
    return fields


def _first(entry: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in entry:
            return entry[key]
    return None


def _strings(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: must be an object")
    for key, item in value.items():
        if not isinstance(item, str):
            raise ValueError(f"{what}.{key}: must be a string (got {type(item).__name__})")
    return dict(value)


def _rewrite(fields: dict[str, Any], inputs: set[str], *, workspace: str, home: str) -> dict[str, Any]:
    """Every host variable in the entry's strings, in the monitor's `${VAR}` form."""

    def one(text: str, where: str) -> str:
        def replace(match: re.Match[str]) -> str:
            inner = match.group(1)
            if inner.startswith("env:"):
                return "${" + inner.removeprefix("env:") + "}"
            if inner.startswith("input:"):
                input_id = inner.removeprefix("input:")
                if input_id not in inputs:
                    raise ValueError(f"{where}: ${{input:{input_id}}} is not declared in 'inputs'")
                return "${" + input_variable(input_id) + "}"
            if inner == "workspaceFolder":
                return workspace
            if inner == "userHome":
                return home
            if _PLAIN.fullmatch(inner):
                return match.group(0)
            raise ValueError(f"{where}: unsupported variable ${{{inner}}}")

        return _VARIABLE.sub(replace, text)

    result = dict(fields)
    for key in ("url", "command", "cwd", "env_file"):
        if isinstance(result.get(key), str):
            result[key] = one(result[key], key)
    if "args" in result:
        result["args"] = [one(arg, "args") for arg in result["args"]]
    for key in ("headers", "env"):
        if key in result:
            result[key] = {name: one(value, f"{key}.{name}") for name, value in result[key].items()}
    return result


_DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*?)\s*$")


def parse_dotenv(text: str) -> dict[str, str]:
    """The variables of an `envFile` (dotenv: `KEY=value`, `export KEY=value`, `#` comments, values in
    single quotes taken as written, in double quotes with `\\n` escapes); ValueError names a bad line."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _DOTENV_LINE.match(line)
        if match is None:
            raise ValueError(f"line {number}: not KEY=value")
        key, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace("\\n", "\n").replace('\\"', '"')
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0]
        found[key] = value
    return found
