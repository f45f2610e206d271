"""What the monitor declares to a server, and how it answers what it declared (2025-11-25 and
2026-07-28 lifecycles).

A poll declares what the hosts it stands for declare (servers may show those hosts a different
listing), so it must also answer as a host may when the server uses what was declared, rather
than with the SDK's "not supported" (-32600) to a capability it just claimed:

- `roots/list`: no roots (`{"roots": []}`): the monitor exposes no files to anyone.
- `elicitation/create`: `{"action": "decline"}`, the user declining to answer.
- `sampling/createMessage`: error -1, "User rejected sampling request", the refusal the
  specification's sampling flow names.

A capability the profile does not declare keeps the SDK's answer. A server that declares no
`tools` capability offers no tools: hosts do not ask it for any (the TypeScript SDK refuses to),
and neither does the monitor (`offers_tools`).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.client import ClientSession
from mcp.client.session import ClientRequestContext

USER_REJECTED = -1
"""The error code the MCP sampling flow names for "User rejected sampling request"."""


async def no_roots(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


async def decline_elicitation(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


async def refuse_sampling(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.ErrorData:
    return types.ErrorData(code=USER_REJECTED, message="User rejected sampling request")


class ProfileSession(ClientSession):
    """A session that declares the target's client profile in either era, and answers each
    capability it declares as a host that says no (see the module's docstring).

    The SDK derives the capabilities it declares from the callbacks it was given (both in
    `initialize` and in every 2026-07-28 request's `_meta`); here the profile says what is declared.
    """

    def __init__(self, *args: Any, capabilities: dict[str, Any], **kwargs: Any) -> None:
        declared = types.ClientCapabilities.model_validate(capabilities)
        if declared.roots is not None:
            kwargs["list_roots_callback"] = no_roots
        if declared.elicitation is not None:
            kwargs["elicitation_callback"] = decline_elicitation
        if declared.sampling is not None:
            kwargs["sampling_callback"] = refuse_sampling
        super().__init__(*args, **kwargs)
        self.declared = declared

    def _build_capabilities(self, version: str) -> types.ClientCapabilities:
        return self.declared
