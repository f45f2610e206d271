"""Rules on servers and host sessions: a small function each, called by whoever sees the condition.

The poll transaction evaluates `server_unreachable`, `listing_changed_silently` and
`listing_flapping` from the server's recorded state, and the watch session's acknowledgement
`notifications_declined`; the host-session checker evaluates `session_stale` and
`session_long_lived`. Each returns the finding, or `rule.cleared()` when what it was given shows the
condition gone, or None; every finding takes the same path to an alert, and a cleared rule's alerts
of the server resolve (`monitor.notify.alerts`). `server-unreachable` ends with any poll that
answers after failures (`clears`); `listing-flapping` ends when the listing has settled for a
window, and session rules when the session's next check finds it clear.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from monitor.core.findings import Finding, Severity
from monitor.core.rules.catalog import PollFacts, Rule, Verdict, rule
from monitor.core.text import make_visible
from monitor.core.times import utc_text

# --- server-unreachable ----------------------------------------------------------------------------


def answered_again(poll: PollFacts) -> bool:
    """A success after failures ends the outage (a healthy server's poll has nothing to clear)."""
    return poll.answered and poll.was_failing


@rule(
    "server-unreachable",
    Severity.HIGH,
    "Several consecutive polls of the server failed; resolved by the next successful poll.",
    scope="server",
    clears=answered_again,
)
def server_unreachable(
    rule: Rule, server: str, failures: int, threshold: int, kind: str, error: str
) -> Finding | None:
    """Raised once, at exactly the `threshold`-th consecutive failure: later failures are the same outage."""
    if failures != threshold:
        return None
    return rule.finding(
        None, None, None, error, f"{server} failed {failures} polls in a row; last: {kind}: {error}"
    )


# --- listing-changed-silently ----------------------------------------------------------------------


@dataclass(frozen=True)
class WatchState:
    """What the monitor's own long-lived watch session of a server has seen."""

    connected_since: datetime | None
    """Since when the session has been healthy; None while it is down."""
    last_notification_at: datetime | None
    list_changed_advertised: bool | None
    shares_polled_instance: bool = True
    """Whether the session talks to the server instance the polls see. Not so for stdio: every poll
    starts a new process, so a new stdio listing is a new deployment that the watch session's own
    (older) process never served, and its silence proves nothing."""


def announced(watch: WatchState, previous_confirmed: datetime) -> bool | None:
    """Whether a change after `previous_confirmed` (the old version's last poll) was announced.

    None when no healthy watch session covered that whole gap, on the very instance that now serves
    the new listing: then silence proves nothing. A session that dropped and reconnected is healthy
    only since it reconnected (the watch manager records each connection afresh).
    """
    if not watch.shares_polled_instance:
        return None
    if watch.connected_since is None or watch.connected_since > previous_confirmed:
        return None
    return watch.last_notification_at is not None and watch.last_notification_at >= previous_confirmed


@rule(
    "listing-changed-silently",
    Severity.HIGH,
    "The listing changed but the monitor's long-lived watch session got no list-changed "
    "notification, so hosts holding long-lived sessions stay stale.",
    scope="server",
)
def listing_changed_silently(
    rule: Rule, server: str, version: int, watch: WatchState, previous_confirmed: datetime
) -> Verdict:
    """Judged at every new version after the first: raised when a watch session, healthy since
    before the old one was confirmed, never heard of it; cleared when it was announced (the server
    does notify after all)."""
    said = announced(watch, previous_confirmed)
    if said is None:
        return None
    if said:
        return rule.cleared()
    assert watch.connected_since is not None
    return rule.finding(
        None,
        None,
        None,
        None,
        f"{server} changed its listing (version {version}) without sending "
        "notifications/tools/list_changed on the monitor's watch session: hosts holding long-lived "
        "sessions will keep acting on the old listing.",
        detail={
            "list_changed_advertised": watch.list_changed_advertised,
            "watching_since": watch.connected_since.isoformat(),
        },
    )


# --- listing-flapping (ends when a listing has lasted the window: `monitor.notify.alerts`) ---------


@rule(
    "listing-flapping",
    Severity.MEDIUM,
    "The listing went back to an earlier version and away again 3 times within 1 h (configurable): one "
    "alert, as severe as the worst change it holds back, replaces per-change alerts until it settles.",
    scope="server",
)
def listing_flapping(
    rule: Rule,
    server: str,
    returns: int,
    threshold: int,
    window: timedelta,
    versions: Sequence[int],
    listings: int,
    held_back: Sequence[Finding] = (),
) -> Finding | None:
    """Raised at every new version while the server has returned `threshold` times within `window`.

    `held_back` are this change's own findings, which open no alerts while the server flaps.
    """
    if returns < threshold:
        return None
    severity = max([Severity.MEDIUM, *(f.severity for f in held_back)], key=lambda s: s.rank)
    shown = ", ".join(f"v{v}" for v in versions[:12]) + (", ..." if len(versions) > 12 else "")
    return rule.finding(
        None,
        None,
        None,
        None,
        f"{server} went back to an earlier listing {returns} times within {window} ({shown}, alternating "
        f"between {listings} listings): per-change alerts are held back until it settles.",
        detail={
            "returns": returns,
            "versions": list(versions),
            "baseline_version": max(1, versions[0] - 1) if versions else None,
            "window_seconds": window.total_seconds(),
        },
        severity=severity,
    )


# --- notifications-declined ------------------------------------------------------------------------


@rule(
    "notifications-declined",
    Severity.MEDIUM,
    "The server advertises tools.listChanged but its subscriptions/listen acknowledgement leaves "
    "toolsListChanged out: hosts on 2026-07-28 sessions will never hear of a change.",
    scope="server",
)
def notifications_declined(
    rule: Rule, server: str, honored: bool, honored_before: bool | None, advertised: bool | None
) -> Verdict:
    """Judged at each listen acknowledgement: raised when one newly leaves `toolsListChanged` out (not
    again while it keeps doing so) of a server that advertises `tools.listChanged`; cleared by one
    that keeps it."""
    if honored:
        return rule.cleared()
    if honored_before is False or not advertised:
        return None
    return rule.finding(
        None,
        "toolsListChanged",
        True,
        False,
        f"{server} advertises tools.listChanged but its subscriptions/listen acknowledgement declines "
        "toolsListChanged: 2026-07-28 hosts will not hear of changes.",
    )


# --- session-stale and session-long-lived (re-checked on a timer: `monitor.sessions.service`) -----


def describe_missed(findings: Sequence[Finding]) -> str:
    """`still treats purge_tenant as read-only; ...` for the worst few changes."""
    worst = sorted(findings, key=lambda f: -f.severity.rank)[:3]
    parts = []
    for finding in worst:
        tool = make_visible(finding.tool or "")
        if finding.rule == "read-only-revoked":
            parts.append(f"still treats {tool} as read-only")
        elif finding.rule == "tool-removed":
            parts.append(f"still offers the removed tool {tool}")
        elif finding.rule == "tool-added":
            parts.append(f"does not know the new tool {tool}")
        else:
            parts.append(f"missed {finding.rule} on {tool}")
    more = len(findings) - len(worst)
    return "; ".join(parts) + (f"; and {more} more change(s)" if more > 0 else "")


@rule(
    "session-stale",
    Severity.HIGH,
    "A registered host session still holds an older listing than the server's current one, past "
    "the grace period; its severity is that of the worst change it missed.",
    scope="session",
)
def session_stale(
    rule: Rule, server: str, session_id: str, client: str | None, missed: Sequence[Finding] | None
) -> Finding:
    """A session behind the current listing: as bad as the worst change it missed.

    `missed` is None when the session holds a listing the monitor never saw (high: nobody can say
    what it is acting on).
    """
    severity = max((f.severity for f in missed), key=lambda s: s.rank) if missed else Severity.HIGH
    what = describe_missed(missed) if missed else "holds a listing the monitor never saw"
    who = make_visible(client or "a host")
    return rule.finding(
        None,
        None,
        None,
        None,
        f"Session {make_visible(session_id)} of {who} on {server} {what}.",
        detail={"session_id": session_id},
        severity=severity,
    )


@rule(
    "session-long-lived",
    Severity.LOW,
    "A registered host session has been open longer than the configured maximum age.",
    scope="session",
)
def session_long_lived(
    rule: Rule, server: str, session_id: str, connected_at: datetime, max_age: timedelta
) -> Finding:
    return rule.finding(
        None,
        None,
        None,
        None,
        f"Session {make_visible(session_id)} on {server} has been open since {utc_text(connected_at)}, "
        f"longer than {max_age}.",
        detail={"session_id": session_id},
    )
