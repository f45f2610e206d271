"""Client profiles: who the monitor says it is when it polls, and what it says it can do.

Servers may legitimately vary a listing by client (`clientInfo`, declared capabilities, HTTP
headers): a server-everything lists more tools to a host that declares sampling. A monitor that
polls as nobody watches a listing no host gets, and one that polls under its own name invites a
server to show it a safe listing and every host another (cloaking). So by default it presents
itself as a mainstream host (Claude Code's clientInfo and User-Agent, docs/clients.md) declaring
what the hosts people use declare, a server may list several profiles, each polled and stored as
its own view, and the monitor's own identity is polled now and then beside them (`own_identity`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Annotated, Any, TypeVar

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator


@functools.cache
def _monitor_version() -> str:
    try:
        return metadata.version("drift-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"


NO_NUL = r"^[^\x00]*$"
"""PostgreSQL text holds no NUL character."""
HeaderValue = Annotated[str, StringConstraints(pattern=r"^[\t\x20-\x7e]{0,8192}$")]
"""An HTTP header value: visible ASCII, spaces and tabs (what every HTTP stack sends as is)."""
HOST_CAPABILITIES: dict[str, Any] = {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}
"""What common hosts (Claude Code, VS Code, Cursor) declare in `initialize`, together: the default
profile's (declaring the union, it sees every tool any of them is shown)."""
HOST_NAME = "claude-code"
HOST_VERSION = "2.1.204"
"""The `clientInfo` of the default profile: Claude Code's, as its CLI sends it (docs/clients.md)."""
HOST_USER_AGENTS = {"claude-code": "claude-code/{version} (cli)"}
"""The User-Agent known hosts send over HTTP, by clientInfo name; any other profile sends
`<name>/<version>` unless its `headers` say otherwise."""
OWN_NAME = "drift-monitor"
"""The monitor's own name: the extra identity polled on a slower cadence (`own_identity`)."""
HEADER_NAME = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$"
"""An HTTP header name (RFC 9110 token)."""


class ClientProfile(BaseModel):
    """One client identity: `clientInfo` name and version, the capabilities declared, the HTTP headers
    sent, a view label."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default=HOST_NAME, min_length=1, max_length=200, pattern=NO_NUL)
    version: str = Field(default=HOST_VERSION, min_length=1, max_length=100, pattern=NO_NUL)
    capabilities: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: dict(HOST_CAPABILITIES),
        description="ClientCapabilities as sent in initialize (e.g. roots, sampling, elicitation)",
    )
    headers: dict[Annotated[str, StringConstraints(pattern=HEADER_NAME)], HeaderValue] = Field(
        default_factory=dict,
        description="HTTP headers every request of this profile carries, over the server's own "
        "(a User-Agent here replaces the host's default)",
    )
    label: str | None = Field(
        default=None,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._@/+-]*$",
        description="The view's name; default: the client name",
    )

    @field_validator("capabilities")
    @classmethod
    def _as_the_sdk_reads_them(cls, capabilities: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """What the SDK's `ClientCapabilities` accepts (`tasks` included), as it sends them: a value
        it refuses is refused here, where it is configured, and a key it does not know (which it would
        never send) is left out. The API takes the same (`ClientProfileIn`)."""
        return sdk_capabilities(types.ClientCapabilities.model_validate(capabilities))

    @property
    def view(self) -> str:
        """The name this profile's view is stored and shown under."""
        return self.label or self.name

    @property
    def user_agent(self) -> str:
        """The User-Agent this profile's HTTP requests carry unless a header sets one."""
        known = HOST_USER_AGENTS.get(self.name)
        return known.format(version=self.version) if known else f"{self.name}/{self.version}"

    def wire(self) -> dict[str, Any]:
        """As stored with the view: what the server was told."""
        return {"name": self.name, "version": self.version, "capabilities": self.capabilities}

    def request_headers(self, server: Mapping[str, str]) -> dict[str, str]:
        """The HTTP headers of this profile's requests: its User-Agent, then the server's headers,
        then its own (a later one replaces an earlier of the same name, whatever its case)."""
        merged = {"user-agent": ("User-Agent", self.user_agent)}
        for headers in (server, self.headers):
            merged.update({key.lower(): (key, value) for key, value in headers.items()})
        return dict(merged.values())


def sdk_capabilities(capabilities: types.ClientCapabilities) -> dict[str, dict[str, Any]]:
    """The capabilities as the SDK sends them: wire names, only what was given."""
    return capabilities.model_dump(by_alias=True, mode="json", exclude_unset=True, exclude_none=True)


DEFAULT_PROFILE = ClientProfile()


def check_profiles(profiles: list[ClientProfile]) -> list[ClientProfile]:
    """At least one profile, each view named once: a second profile of one name becomes `name-2`
    (the first profile is the primary view: the server's version history)."""
    if not profiles:
        return [DEFAULT_PROFILE]
    named: list[ClientProfile] = []
    seen: set[str] = set()
    for profile in profiles:
        view, n = profile.view, 1
        while view in seen:
            n += 1
            view = f"{profile.view[:190]}-{n}"
        seen.add(view)
        named.append(profile if view == profile.view else profile.model_copy(update={"label": view}))
    return named


def own_identity(primary: ClientProfile, profiles: Sequence[ClientProfile]) -> ClientProfile | None:
    """The primary profile under the monitor's own name (clientInfo and User-Agent), polled on a
    slower cadence beside the others: a server that shows a host's identity another listing than
    the monitor's is cloaking by identity. None when a profile already polls under that name."""
    if any(profile.name == OWN_NAME for profile in profiles):
        return None
    version = _monitor_version()
    taken = {profile.view for profile in profiles}
    label, n = OWN_NAME, 1
    while label in taken:
        n += 1
        label = f"{OWN_NAME}-{n}"
    return primary.model_copy(
        update={
            "name": OWN_NAME,
            "version": version,
            "label": label,
            "headers": {**primary.headers, "User-Agent": f"{OWN_NAME}/{version}"},
        }
    )


def stored_profiles(stored: Any) -> list[ClientProfile]:
    """The profiles kept with a server registered over the API (validated when registered)."""
    if not isinstance(stored, list) or not stored:
        return [DEFAULT_PROFILE]
    return [ClientProfile.model_validate(profile) for profile in stored]


V = TypeVar("V")


def matching_view(
    views: Sequence[tuple[V, Mapping[str, Any]]], declared: Mapping[str, Any] | None, client: str | None
) -> V | None:
    """Of `(view, what its profile told the server)` pairs, the view that declared the capabilities a
    host declared (and, among several, the one whose client name the host's `client` starts with);
    None when the host's capabilities are unknown or no view declared them."""
    if declared is None:
        return None
    matching = [(view, wire) for view, wire in views if set(wire.get("capabilities") or {}) == set(declared)]
    named = [view for view, wire in matching if client and client.startswith(str(wire.get("name")))]
    found = named or [view for view, _ in matching]
    return found[0] if found else None
