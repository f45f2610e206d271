"""Client profiles: who the monitor says it is when it polls, and what it says it can do.

Servers may legitimately vary a listing by client (`clientInfo`, declared capabilities): a
server-everything lists more tools to a host that declares sampling. A monitor that polls as
nobody watches a listing no host gets, so by default it declares what the hosts people use
declare (roots, sampling, elicitation), and a server may list several profiles, each polled and
stored as its own view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, TypeVar

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, field_validator


def _monitor_version() -> str:
    try:
        return metadata.version("drift-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"


NO_NUL = r"^[^\x00]*$"
"""PostgreSQL text holds no NUL character."""
HOST_CAPABILITIES: dict[str, Any] = {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}}
"""What common hosts (Claude Code, VS Code, Cursor) declare in `initialize`: the default profile's."""


class ClientProfile(BaseModel):
    """One client identity: `clientInfo` name and version, the capabilities declared, a view label."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="drift-monitor", min_length=1, max_length=200, pattern=NO_NUL)
    version: str = Field(default_factory=_monitor_version, min_length=1, max_length=100, pattern=NO_NUL)
    capabilities: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: dict(HOST_CAPABILITIES),
        description="ClientCapabilities as sent in initialize (e.g. roots, sampling, elicitation)",
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

    def wire(self) -> dict[str, Any]:
        """As stored with the view: what the server was told."""
        return {"name": self.name, "version": self.version, "capabilities": self.capabilities}


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
