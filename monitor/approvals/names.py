"""How hosts name servers and tools, and finding the monitored server behind such a name.

A host names an MCP tool after the server's name in the host's own config, made safe by its own
rule: Claude Code and Codex call it `mcp__<server>__<tool>` with every character outside
`[A-Za-z0-9_-]` replaced by `_` (so a registry server `io.github.acme.search` is
`mcp__io_github_acme_search__...`); Gemini CLI calls it `mcp_<server>_<tool>` with characters outside
`[A-Za-z0-9_.:-]` replaced. Server names may hold the separator themselves (`a__b`, `srv_`), so a name
is matched against every monitored name and alias, normalised the host's way, longest first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

Normalise = Callable[[str], str]

_CLAUDE_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_GEMINI_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def claude_name(name: str) -> str:
    """A name as Claude Code (and Codex) put it into `mcp__<server>__<tool>`."""
    return _CLAUDE_UNSAFE.sub("_", name)


def gemini_name(name: str) -> str:
    """A name as Gemini CLI puts it into `mcp_<server>_<tool>`."""
    return _GEMINI_UNSAFE.sub("_", name)


def exact_name(name: str) -> str:
    """A name as a host that uses it unchanged (ToolHive's resource names) sends it."""
    return name


@dataclass(frozen=True)
class Match:
    """The monitored servers a host's name may mean (several only when two normalise alike), and the
    tool name as the host wrote it."""

    servers: tuple[str, ...]
    tool: str


class ServerNames:
    """Every monitored server's name and aliases, normalised one host's way, for matching."""

    def __init__(self, names: Mapping[str, Iterable[str]], normalise: Normalise) -> None:
        """`names`: each server's name -> its aliases."""
        self.normalise = normalise
        index: dict[str, set[str]] = {}
        for server, aliases in names.items():
            for name in (server, *aliases):
                index.setdefault(normalise(name), set()).add(server)
        self._index = {key: tuple(sorted(servers)) for key, servers in index.items()}

    def server(self, name: str) -> tuple[str, ...]:
        """The servers a bare server name (ToolHive's, Gemini's `mcp_context`) means."""
        return self._index.get(self.normalise(name), ())

    def split(self, qualified: str, prefix: str, separator: str) -> Match | None:
        """`<prefix><server><separator><tool>` -> the servers and the tool, the longest known server
        name first (so `mcp__a__b__t` is server `a__b` when one is monitored, else `a`). None: the name
        does not have that form, or names no monitored server."""
        if not qualified.startswith(prefix):
            return None
        rest = qualified[len(prefix) :]
        at = rest.rfind(separator)
        while at > 0:
            tool = rest[at + len(separator) :]
            servers = self._index.get(rest[:at])
            if servers and tool:
                return Match(servers, tool)
            at = rest.rfind(separator, 0, at)
        return None


def tool_candidates(tool: str, listed: Collection[str], normalise: Normalise) -> list[str]:
    """The listed tools a host's tool name may mean: itself when listed, else every listed tool that
    the host's normalisation turns into it."""
    if tool in listed:
        return [tool]
    return [name for name in listed if normalise(name) == tool]
