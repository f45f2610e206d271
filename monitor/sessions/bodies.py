"""What hosts and gateways send to report a session and its heartbeats (`/api/v1/sessions`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from monitor.web.schemas import FINGERPRINT, NO_NUL, SERVER_NAME, TOOLS_SCHEMA, StoredText, UtcDatetime


def _one_report(fingerprint: str | None, tools: list[dict[str, Any]] | None, *, required: bool) -> None:
    if fingerprint is not None and tools is not None:
        raise ValueError("give either fingerprint or tools, not both")
    if required and fingerprint is None and tools is None:
        raise ValueError("a session report needs a fingerprint or the tools it cached")


class SessionCreate(BaseModel):
    """A host or gateway reports a session and the listing it cached: its fingerprint or the tools."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["fingerprint"], "properties": {"fingerprint": {"type": "string"}}},
                {"required": ["tools"], "properties": {"tools": {"type": "array"}}},
            ]
        },
    )

    server: str = Field(min_length=1, max_length=200, pattern=SERVER_NAME)
    session_id: StoredText = Field(min_length=1, max_length=200, pattern=NO_NUL)
    client: StoredText | None = Field(default=None, max_length=500, pattern=NO_NUL)
    connected_at: UtcDatetime
    client_capabilities: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="The capabilities the host declared to the server: the session is compared with the "
        "client view that declared the same",
    )
    fingerprint: str | None = Field(default=None, pattern=FINGERPRINT)
    tools: list[dict[str, Any]] | None = Field(
        default=None, max_length=100_000, json_schema_extra=TOOLS_SCHEMA
    )

    @model_validator(mode="after")
    def _fingerprint_or_tools(self) -> SessionCreate:
        _one_report(self.fingerprint, self.tools, required=True)
        return self


class SessionHeartbeat(BaseModel):
    """A heartbeat; with a fingerprint or the tools when the host re-fetched the listing."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "not": {
                "required": ["fingerprint", "tools"],
                "properties": {"fingerprint": {"type": "string"}, "tools": {"type": "array"}},
            }
        },
    )

    fingerprint: str | None = Field(default=None, pattern=FINGERPRINT)
    tools: list[dict[str, Any]] | None = Field(
        default=None, max_length=100_000, json_schema_extra=TOOLS_SCHEMA
    )

    @model_validator(mode="after")
    def _not_both(self) -> SessionHeartbeat:
        _one_report(self.fingerprint, self.tools, required=False)
        return self
