"""`[[servers]]` entries: how to reach a server, how often to poll it, who to poll it as.

`${VAR}` in a server's url, headers, args or env is kept as written here and read from the
environment when the server becomes a poll target (`monitor.collect.targets`); the expanded values
are secrets and never leave the process (not in the database, not in logs, not in errors).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from monitor.config.durations import Duration
from monitor.core.clients import DEFAULT_PROFILE, ClientProfile, check_profiles
from monitor.core.states import ApprovalMode

SERVER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
Transport = Literal["http", "sse", "stdio"]


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME_PATTERN)
    transport: Transport
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_file: str | None = None
    """For transport "stdio": a dotenv file read when the server is polled (`env` wins over it), as
    VS Code's and Cursor's `envFile`."""
    cwd: str | None = None
    interval: Duration | None = None
    timeout: Duration | None = None
    era: Literal["handshake", "modern"] = "handshake"
    sse_fallback: bool = False
    """For transport "http": when the URL refuses Streamable HTTP with a 4xx, poll it over SSE, as
    hosts do with a bare `url` (set for such imported entries)."""
    approval: ApprovalMode = ApprovalMode.TOFU
    """What the decision point treats as approved (docs/contract.md section 10)."""
    aliases: list[str] = Field(default_factory=list)
    """Other names hosts know the server by (Claude Code's `mcp__<name>__tool`), for the hook adapters."""
    decision_max_age: Duration | None = None
    """How old the server's last good listing may be before decisions stop trusting it; default:
    `[decisions] max_age`, else three of its poll intervals."""
    client: list[ClientProfile] = Field(default_factory=lambda: [DEFAULT_PROFILE])
    """Who the monitor polls as: one profile (a table) or several (an array), each its own view."""

    @field_validator("client", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("client")
    @classmethod
    def _distinct_views(cls, profiles: list[ClientProfile]) -> list[ClientProfile]:
        return check_profiles(profiles)

    @model_validator(mode="after")
    def _transport_fields(self) -> ServerConfig:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError('command: required for transport "stdio"')
            if self.url or self.headers:
                raise ValueError('url, headers: not used by transport "stdio"')
        else:
            if self.env_file:
                raise ValueError(f'env_file: not used by transport "{self.transport}"')
            if not self.url:
                raise ValueError(f'url: required for transport "{self.transport}"')
            if not re.match(r"^(https?://|\$\{)", self.url):  # a leading ${VAR} is checked once expanded
                raise ValueError(f"url: must start with http:// or https:// (got {self.url!r})")
            if self.command or self.args:
                raise ValueError(f'command, args: not used by transport "{self.transport}"')
        return self
