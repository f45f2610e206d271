"""Why a change to approvals was refused: one type per failure, mapped alike by every adapter.

The API and the dashboard answer `NotFound` with 404, `Conflict` with 409 and `Unstorable` with
422 (`monitor.approvals.api.http_status`); the command line prints the message and exits 2.
"""

from __future__ import annotations


class ApprovalError(ValueError):
    """A change the monitor cannot make; the message says why, in one sentence."""


class NotFound(ApprovalError):
    """The server, the version, a tool in it, or an approval to revoke does not exist."""


class Conflict(ApprovalError):
    """The change cannot be made in the state things are in (nothing polled yet, a mode the config sets)."""


class Unstorable(ApprovalError):
    """A name or note holds characters no database can store (NUL, lone surrogates)."""
