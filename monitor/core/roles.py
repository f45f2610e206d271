"""Roles and what each may do (docs/contract.md section 12), and the caller a request or command is.

`decide` is for hosts and gateways asking before a call; the others form a ladder, each including
the one below it: `viewer` reads, `responder` also acknowledges and resolves alerts and manages
silences, `approver` also approves and revokes, `admin` also manages servers, webhooks and tokens,
and may ask decisions too (the configured token, `config`, is an admin and served hooks before
named tokens existed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Permission(enum.StrEnum):
    DECIDE = "decide"
    """Decisions, host hooks, the ToolHive PDP."""
    REPORT = "report"
    """Host session reports (what a host holds: they can open session alerts)."""
    READ = "read"
    """Every read: API GETs, pages, /metrics."""
    RESPOND = "respond"
    """Acknowledge and resolve alerts, silences, poll a server now."""
    APPROVE = "approve"
    """Approve, revoke, change an approval mode."""
    ADMIN = "admin"
    """Servers, aliases, tokens, the audit log."""


class Role(enum.StrEnum):
    DECIDE = "decide"
    VIEWER = "viewer"
    RESPONDER = "responder"
    APPROVER = "approver"
    ADMIN = "admin"

    @property
    def permissions(self) -> frozenset[Permission]:
        return GRANTS[self]


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.DECIDE: frozenset({Permission.DECIDE, Permission.REPORT}),
    Role.VIEWER: frozenset({Permission.READ}),
    Role.RESPONDER: frozenset({Permission.READ, Permission.RESPOND}),
    Role.APPROVER: frozenset({Permission.READ, Permission.RESPOND, Permission.APPROVE}),
    Role.ADMIN: frozenset(Permission),
}
NEEDED: dict[Permission, Role] = {
    Permission.DECIDE: Role.DECIDE,
    Permission.REPORT: Role.DECIDE,
    Permission.READ: Role.VIEWER,
    Permission.RESPOND: Role.RESPONDER,
    Permission.APPROVE: Role.APPROVER,
    Permission.ADMIN: Role.ADMIN,
}
"""The least role that may do each thing: what a refusal names."""

OPEN = frozenset({Permission.READ, Permission.DECIDE})
"""What anybody may do while nothing is configured to authenticate with, as before roles existed:
read, and ask decisions (so hooks work on a loopback-only monitor); reporting sessions, like every
change, needs a token."""


class Via(enum.StrEnum):
    """How a caller was identified."""

    TOKEN = "token"  # noqa: S105 (a way of being identified, not a secret)
    """A bearer secret (or ToolHive's Basic password): the configured token or a named one."""
    SESSION = "session"
    """A dashboard session signed in with a token."""
    PROXY = "proxy"
    """A person named by a trusted authenticating proxy."""
    COMMAND_LINE = "command line"
    """Someone with the config and the database at hand."""
    OPEN = "open"
    """Nobody, while nothing is configured to authenticate with: reads and decisions are open."""
    NONE = "none"
    """Nobody, while authentication is required."""
    REFUSED = "refused"
    """A secret that is no valid token (unknown, revoked or expired): refused at once."""
    UNVERIFIED = "unverified"
    """Could not be identified: the database failed."""


CONFIG_NAME = "config"
"""How a dashboard session names the token configured by `api_token_env` (an admin), and the name
it acted under before `api_token_name`: no named token may take it, so a session signed in with the
configured token can never be read as a named one, whatever `api_token_name` says."""
DEFAULT_TOKEN_NAME = "Administrator"  # noqa: S105 - a person's name, not a secret
"""The name the configured token acts under unless `[monitor] api_token_name` gives another."""


@dataclass(frozen=True)
class Caller:
    """Who a request or a command is, and what it may do."""

    name: str
    """The actor of its changes: a token's name, the configured token's (`api_token_name`), a
    proxy-authenticated person, `anonymous`, or `command line (<user>)`."""
    role: Role | None
    """None: nobody in particular (anonymous, or a failed sign-in)."""
    via: Via
    source: str
    """From where: the client's address, or `command line`."""
    session: str | None = None
    """The dashboard session a form must be bound to (its CSRF token is derived from it)."""

    def may(self, permission: Permission) -> bool:
        if self.via == Via.OPEN:  # nothing to authenticate with: reads and decisions, as before roles
            return permission in OPEN
        return self.role is not None and permission in self.role.permissions

    @property
    def known(self) -> bool:
        return self.role is not None


def refusal(caller: Caller, permission: Permission) -> str:
    """The 403 message: the role that would be needed."""
    needed = NEEDED[permission]
    also = {Role.DECIDE: " (or admin)", Role.ADMIN: ""}.get(needed, " or higher")
    held = f"{caller.name} has the role {caller.role.value}" if caller.role else "no role"
    return f"this needs the role {needed.value}{also}; {held}"
