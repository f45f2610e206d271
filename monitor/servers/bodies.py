"""What clients send to register a server and name its aliases (`POST /api/v1/servers`,
`PUT /api/v1/servers/{name}/aliases`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import mcp_types as types
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from monitor.core.clients import HOST_NAME, sdk_capabilities
from monitor.core.states import ApprovalMode
from monitor.web.schemas import NO_NUL, REFUSED_URL_PATTERN, SERVER_NAME, URL_PATTERN, HeaderName, HeaderValue


def _refuse_stdio(value: Any) -> Any:
    if value == "stdio":
        raise ValueError("stdio servers are registered only from config files")
    return value


class ClientProfileIn(BaseModel):
    """A client profile over the API: its capabilities as the SDK's `ClientCapabilities` reads them
    (`{"roots": {"listChanged": true}, "sampling": {}, "tasks": {"requests": {...}}}`), as in the
    config file (`ClientProfile`)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default=HOST_NAME, min_length=1, max_length=200, pattern=NO_NUL)
    version: str | None = Field(default=None, min_length=1, max_length=100, pattern=NO_NUL)
    capabilities: types.ClientCapabilities | None = Field(
        default=None,
        description="The MCP `ClientCapabilities` declared (the SDK's model: what the config file takes "
        "too, `tasks` included). Default: roots, sampling and elicitation, as common hosts declare",
    )
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict,
        max_length=50,
        description="HTTP headers of this profile's requests, over the server's (a User-Agent)",
        json_schema_extra={"additionalProperties": False},
    )
    label: str | None = Field(default=None, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._@/+-]*$")

    def profile(self) -> dict[str, Any]:
        profile = self.model_dump(exclude_none=True, exclude={"capabilities"})
        if self.capabilities is not None:
            profile["capabilities"] = sdk_capabilities(self.capabilities)
        return profile


AliasName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=SERVER_NAME)]


class AliasesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    aliases: list[AliasName] = Field(max_length=50, description="Replaces the aliases set over the API")


class ServerCreate(BaseModel):
    """A server to watch. Only http and sse: stdio servers run commands, so only config files add them."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME)
    transport: Annotated[Literal["http", "sse"], BeforeValidator(_refuse_stdio)] = Field(
        default="http", description="`stdio` is refused: stdio servers are registered only from config files"
    )
    url: str = Field(
        min_length=1,
        max_length=2048,
        pattern=URL_PATTERN,
        description="Its host must pass `[monitor] allowed_server_hosts` (`not`: what the default refuses)",
        json_schema_extra={"not": {"pattern": REFUSED_URL_PATTERN}},
    )
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict,
        description="Sent with every poll (e.g. Authorization); stored, never returned",
        json_schema_extra={"additionalProperties": False},
    )
    interval_seconds: float | None = Field(default=None, gt=0, le=86400 * 365)
    era: Literal["handshake", "modern"] = "handshake"
    aliases: list[AliasName] = Field(
        default_factory=list,
        max_length=50,
        description="Other names hosts know it by (Claude Code's"
        " `mcp__<name>__tool`, ToolHive's resource names)",
    )
    approval: ApprovalMode = Field(
        default=ApprovalMode.TOFU,
        description="`tofu` approves the first version seen, `review` nothing until a person does, "
        "`off` allows every call",
    )
    client: ClientProfileIn | list[ClientProfileIn] | None = Field(
        default=None,
        description="Who the monitor polls as: one profile or several, each polled and stored as its own "
        "view (the first is the server's version history). Default: like common hosts (roots, sampling, "
        "elicitation)",
    )
