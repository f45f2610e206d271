"""The state vocabularies: each is stored as its string value and compared as an enum everywhere."""

from __future__ import annotations

import enum


class AlertState(enum.StrEnum):
    """open -> acknowledged -> resolved; a resolved alert never reopens (a new one opens instead)."""

    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"

    @classmethod
    def unresolved(cls) -> tuple[AlertState, ...]:
        return (cls.OPEN, cls.ACKNOWLEDGED)


class ResolveCause(enum.StrEnum):
    """Why an alert was resolved (docs/contract.md section 13), kept with it and given wherever the
    resolution appears: the page, the timeline, the webhooks and the log."""

    CLEARED = "cleared"
    """The monitor found the condition gone."""
    BY_HAND = "by-hand"
    """A person resolved it, with a note."""
    APPROVED = "approved"
    """A person approved the tool's definition it was about."""
    SILENCED = "silenced"
    """A person silenced what it matches, until a time."""


class AlertStateFilter(enum.StrEnum):
    """Which alerts a list shows (the API's and the dashboard's `state=`): one state, `unresolved`
    (open and acknowledged: an acknowledged alert is still an incident), or all of them."""

    UNRESOLVED = "unresolved"
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"
    ALL = "all"

    def states(self) -> tuple[AlertState, ...] | None:
        """The states it admits; None for all."""
        if self is AlertStateFilter.ALL:
            return None
        if self is AlertStateFilter.UNRESOLVED:
            return AlertState.unresolved()
        return (AlertState(self.value),)


class DeliveryState(enum.StrEnum):
    """An outbox row: pending until a receiver answers 2xx (delivered), refuses it for good with a 4xx
    other than 408 and 429 (failed), or its expiry passes (expired); a re-post whose alerts have all
    been resolved meanwhile is superseded, never sent."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"


class PollErrorKind(enum.StrEnum):
    """Why a poll failed, in one word a person can filter on."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    PROTOCOL = "protocol"
    LIMIT = "limit"
    SERVER_ERROR = "server-error"
    PROCESS_EXIT = "process-exit"
    MALFORMED = "malformed"
    STORAGE = "storage"
    """The database refused to store what the server sent: recorded as a failed poll, never dropped."""
    TORN_LISTING = "torn-listing"
    """The listing changed while it was paged, every time it was read: no consistent listing to store."""

    @classmethod
    def refused_answers(cls) -> frozenset[PollErrorKind]:
        """The server answered, but with something the monitor refused to store as a listing; a host
        may accept it, so decisions about the server fail closed (`listing-unverifiable`). The other
        kinds are failures to get an answer at all, after which the last good listing stands."""
        return frozenset({cls.PROTOCOL, cls.LIMIT, cls.MALFORMED, cls.STORAGE, cls.TORN_LISTING})


class ServerStatus(enum.StrEnum):
    """A server's health as the last poll left it."""

    OK = "ok"
    FAILING = "failing"
    OVERDUE = "overdue"
    """No poll attempt for more than `OVERDUE_INTERVALS` of its intervals: no data is not ok."""
    NEVER_POLLED = "never polled"
    NO_TOOLS = "no tools"
    """Answers, but declares no `tools` capability: it offers hosts no tools (an empty listing)."""


OVERDUE_INTERVALS = 3
"""A server whose newest poll attempt is older than this many of its poll intervals is overdue
(docs/contract.md section 13): nobody is polling it, whatever its last poll said."""


class ServerOrigin(enum.StrEnum):
    """Where a server was registered: a config file (trusted, may be stdio) or the HTTP API."""

    CONFIG = "config"
    API = "api"


class ApprovalMode(enum.StrEnum):
    """Per server (docs/contract.md section 10): what the decision point treats as approved."""

    TOFU = "tofu"
    """The first version seen is approved automatically (trust on first use)."""
    REVIEW = "review"
    """Nothing is approved until a person approves it."""
    OFF = "off"
    """No decisions for this server: every call is allowed."""


class ApprovalAction(enum.StrEnum):
    """An event of the approval history."""

    APPROVE = "approve"
    REVOKE = "revoke"
    MODE = "mode"


class DecisionKind(enum.StrEnum):
    """The decision point's answer before a tool call, as hosts name their permission outcomes."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"

    @property
    def strictness(self) -> int:
        """allow < ask < deny: of two answers, the stricter one stops more."""
        return (DecisionKind.ALLOW, DecisionKind.ASK, DecisionKind.DENY).index(self)


class AlertEvent(enum.StrEnum):
    """What happened to an alert, as a delivery's `event_type` (each sink hears the ones it wants)."""

    OPENED = "alert.opened"
    RESOLVED = "alert.resolved"
    ACKNOWLEDGED = "alert.acknowledged"
    """Only sinks that track acknowledgement hear it (PagerDuty); webhooks carry opened and resolved."""
    FIRING = "alerts.firing"
    """The periodic re-post of every open alert, for sinks that forget what is not repeated."""
