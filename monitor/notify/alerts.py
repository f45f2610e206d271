"""Alerts: findings worth a person's attention, one per (server, tool or session, rule) while open.

An alert is open, acknowledged or resolved. While it is not resolved its `open_key` holds the
(server, rule, tool, session) key under a unique index, so a repeat finding attaches to it
instead of opening another: one webhook when the condition starts, one when it clears, no storm.
Everything here runs inside the caller's transaction, so an alert and its outbox rows commit
together with the findings that caused them.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence, Set
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from monitor.config import Config
from monitor.config.webhooks import WebhookConfig
from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.rules import CATALOG, TOOL_RULES, Check
from monitor.core.states import AlertEvent, AlertState, ResolveCause
from monitor.notify.events import alert_event
from monitor.notify.outbox import DEFAULT_EXPIRY, enqueue, opened_for, wake_after_commit
from monitor.notify.payloads import MAX_FINDINGS, alert_payload
from monitor.notify.sinks import hears
from monitor.silences import service as silences
from monitor.store.db import insert
from monitor.store.flapping import settled_changes
from monitor.store.installation import alert_keys
from monitor.store.models import (
    Alert,
    AlertFinding,
    FindingRecord,
    ListingTool,
    Server,
    Snapshot,
    ToolDefinition,
)
from monitor.store.polled import RecordedPoll
from monitor.store.polls import PollHook, Store, store_findings
from monitor.store.records import resolution

_TOOL_CHECKS: dict[str, Check] = {rule.id: rule.check for rule in TOOL_RULES if rule.check}
_CLEARED_BY_POLLS = [rule for rule in CATALOG.values() if rule.clears is not None]
"""The server rules a recorded poll can show cleared, each with its own test (`Rule.clears`)."""


class Alerting:
    """The alert policy and poll hook: which findings open alerts, and which webhooks hear of them."""

    def __init__(
        self,
        webhooks: Sequence[WebhookConfig] = (),
        *,
        base_url: str,
        min_severity: Severity | None = None,
        delivery_expiry: timedelta = DEFAULT_EXPIRY,
        clear_for: timedelta = timedelta(seconds=15),
        flapping_window: timedelta = timedelta(hours=1),
    ) -> None:
        self.webhooks = list(webhooks)
        self.base_url = base_url.rstrip("/")
        self.min_severity = min_severity or min(
            (webhook.min_severity for webhook in self.webhooks), key=lambda s: s.rank, default=Severity.HIGH
        )
        """Findings at or above this open alerts; by default the lowest any webhook wants."""
        self.delivery_expiry = delivery_expiry
        self.clear_for = clear_for
        """How long a re-checked condition must stay clear before its alert resolves: one full check."""
        self.flapping_window = flapping_window
        """A flapping server has settled once one listing has lasted this long."""
        self.on_enqueue: Callable[[], None] | None = None
        """Called after a transaction that enqueued deliveries commits (e.g. `Deliverer.notify`)."""

    @classmethod
    def from_config(cls, config: Config) -> Alerting:
        lowest = min(
            [config.monitor.alert_min_severity, *(webhook.min_severity for webhook in config.webhooks)],
            key=lambda s: s.rank,
        )
        return cls(
            config.webhooks,
            base_url=config.monitor.public_url,
            min_severity=lowest,
            clear_for=timedelta(seconds=config.monitor.session_check_interval),
            flapping_window=timedelta(seconds=config.monitor.flapping_window),
        )

    def after_poll(self, session: Session, poll: RecordedPoll) -> None:
        """Poll hook: clear what the poll shows fixed, then raise what it found.

        While the server flaps, its tool findings are stored but open no alerts: the one
        `listing-flapping` alert stands for them until the server settles.
        """
        undone: set[str] = set()
        findings = list(poll.findings)
        flapping = None
        # Only a poll of this server opens one, and this poll holds the server's row (locked on
        # PostgreSQL; SQLite has one writer): none opens between this read and the commit.
        if poll.server.flapping_alert_possible:
            flapping = _open_alert(session, open_key(poll.server.id, "listing-flapping", None, None))
            poll.server.flapping_alert_possible = flapping is not None
        facts = poll.facts
        for rule in _CLEARED_BY_POLLS:
            if rule.clears is not None and rule.clears(facts):
                resolve_matching(session, poll.server.id, rule.id, now=poll.now, policy=self)
        if poll.snapshot is not None:
            if poll.new_version:
                undone = self._resolve_cleared(session, poll.server.id, poll.snapshot.listing_id, poll.now)
            if poll.views_agree:  # every client view shows these tools alike again
                for alert in session.scalars(
                    select(Alert).where(
                        Alert.server_id == poll.server.id,
                        Alert.rule == "listing-varies-by-client",
                        Alert.state.in_(AlertState.unresolved()),
                    )
                ):
                    if alert.tool in poll.views_agree:
                        resolve(session, alert, poll.now, policy=self)
            if flapping is not None:
                findings += self._settle(session, flapping, poll.snapshot, poll.now)
        if flapping is not None and flapping.state == AlertState.RESOLVED:
            flapping = None
        if flapping is not None or any(f.rule == "listing-flapping" for f in findings):
            findings = [f for f in findings if f.rule not in _TOOL_CHECKS]
        self.raise_findings(session, poll.server, findings, now=poll.now, undone=undone)

    def _settle(
        self, session: Session, alert: Alert, current: Snapshot, now: datetime
    ) -> list[FindingRecord]:
        """Resolve the open `listing-flapping` `alert` once one listing has lasted the window, and
        return what the flapping held back: the findings from before it began to where it settled,
        now stored."""
        if now - current.first_seen < self.flapping_window:
            return []
        resolve(session, alert, now, policy=self)
        server_id = alert.server_id
        first = session.scalar(
            select(FindingRecord)
            .join(AlertFinding, AlertFinding.finding_id == FindingRecord.id)
            .where(AlertFinding.alert_id == alert.id)
            .order_by(FindingRecord.id)
            .limit(1)
        )
        baseline = first.detail.get("baseline_version") if first and isinstance(first.detail, dict) else None
        settled = (
            settled_changes(session, server_id, baseline, current) if isinstance(baseline, int) else None
        )
        if settled is None:
            return []
        start, found = settled
        return store_findings(session, server_id, found, now, from_snapshot=start.id, to_snapshot=current.id)

    def raise_findings(
        self,
        session: Session,
        server: Server,
        findings: Sequence[FindingRecord],
        *,
        now: datetime,
        session_id: str | None = None,
        undone: Set[str] = frozenset(),
    ) -> list[Alert]:
        """The one path from stored findings to alerts, whoever found them (a poll, a session check).

        Applies the severity policy, opens an alert per (rule, tool or session) or attaches to the
        one already open, and writes the outbox rows for the webhooks that want to hear, all in the
        caller's transaction. `undone` holds changes that exactly reverse an alert this transaction
        resolved: flipping back is the fix, so it does not open the opposite alert as well.
        """
        if not findings:  # nothing to raise: the silences need not be read (most polls find nothing)
            return []
        groups: dict[tuple[str, str | None], list[FindingRecord]] = defaultdict(list)
        muted = silences.muting(session, server.name, now)
        for record in findings:
            if (silence := muted.match(record.tool, record.rule)) is not None:
                record.silence_id = silence.id  # stored and shown as muted; no alert, no webhook
                continue
            reverses = _change_key(record.tool, record.field, record.old, record.new) in undone
            if record.severity_rank >= self.min_severity.rank and not reverses:
                groups[record.rule, record.tool].append(record)
        opened = []
        for (rule, tool), records in groups.items():
            worst = max(records, key=lambda record: record.severity_rank)
            opened.append(
                open_or_attach(
                    session,
                    server,
                    rule=rule,
                    severity=Severity(worst.severity),
                    tool=tool,
                    session_id=session_id,
                    message=worst.message,
                    findings=records,
                    now=now,
                    policy=self,
                )
            )
        return opened

    def raise_standing(
        self, session: Session, server: Server, finding: Finding, *, session_id: str, now: datetime
    ) -> None:
        """A condition re-checked on a timer (a host session's): stored and raised when it starts or
        changes severity. A repeat at the same severity only marks its alert as still seen: one
        condition is one finding and one alert, however often it is checked. A lower one lowers the
        alert in place (a session behind a version that undid the worst it missed); no webhook.
        """
        alert = _open_alert(session, open_key(server.id, finding.rule, finding.tool, session_id))
        if alert is not None and alert.severity_rank > finding.severity.rank:
            records = store_findings(session, server.id, [finding], now)
            _attach(session, alert, server, finding.severity, finding.message, records, now, self, lower=True)
            return
        if alert is not None and alert.severity_rank == finding.severity.rank:
            alert.last_seen_at = max(alert.last_seen_at, now)
            alert.clear_since = None  # it came back before clearing for a full check: the same alert
            return
        muted = silences.muting(session, server.name, now).match(finding.tool, finding.rule) is not None
        if (muted or finding.severity.rank < self.min_severity.rank) and session.scalar(
            select(FindingRecord.id)
            .where(
                FindingRecord.server_id == server.id,
                FindingRecord.rule == finding.rule,
                FindingRecord.message == finding.message,
            )
            .limit(1)
        ):
            return  # it opens no alert, and is stored already: not once more per check
        records = store_findings(session, server.id, [finding], now)
        self.raise_findings(session, server, records, now=now, session_id=session_id)

    def clear_standing(
        self, session: Session, server_id: int, rule: str, *, session_id: str, now: datetime
    ) -> None:
        """A re-checked condition found clear: its alert resolves once it has stayed clear for a full check.

        The first clear check only notes the time; a later one at least `clear_for` after it resolves.
        A condition that returns in between (`raise_standing`) keeps the same alert: one condition is
        one alert, and a checker racing a heartbeat cannot turn it into open, resolved, open.
        """
        alert = _open_alert(session, open_key(server_id, rule, None, session_id))
        if alert is None:
            return
        if alert.clear_since is None:
            alert.clear_since = now
        elif now - alert.clear_since >= self.clear_for:
            resolve(session, alert, now, policy=self)

    def _resolve_cleared(self, session: Session, server_id: int, listing_id: int, now: datetime) -> set[str]:
        """Resolve tool alerts whose rule no longer fires from the listing they started at to this one.

        Comparing with the alert's starting point (not the previous version) keeps a tool that went
        read-only -> writable -> (unrelated edit) alerted, and clears it once it is read-only again.
        Returns the changes that would exactly undo each resolved alert's first finding: flipping
        back is the fix, so it must not open the opposite alert (read-only-claimed) as well.
        """
        first_finding = (
            select(func.min(AlertFinding.finding_id))
            .where(AlertFinding.alert_id == Alert.id)
            .correlate(Alert)
            .scalar_subquery()
        )
        rows = session.execute(
            select(Alert, FindingRecord, Snapshot.listing_id)
            .select_from(Alert)
            .join(FindingRecord, FindingRecord.id == first_finding)
            .join(Snapshot, Snapshot.id == FindingRecord.from_snapshot_id)
            .where(
                Alert.server_id == server_id,
                Alert.state.in_(AlertState.unresolved()),
                Alert.tool.is_not(None),
                Alert.rule.in_(list(_TOOL_CHECKS)),
            )
            .with_for_update(of=Alert)
        ).all()
        current = _definitions(session, listing_id, [alert for alert, _, _ in rows])
        baselines: dict[int, dict[str, dict[str, Any]]] = {}
        undone: set[str] = set()
        for alert, first, baseline_id in rows:
            if alert.tool is None:
                continue
            if baseline_id not in baselines:
                same_start = [other for other, _, start in rows if start == baseline_id]
                baselines[baseline_id] = _definitions(session, baseline_id, same_start)
            change = ToolChange(alert.tool, baselines[baseline_id].get(alert.tool), current.get(alert.tool))
            if not any(
                finding.rule == alert.rule and finding.severity.rank >= self.min_severity.rank
                for finding in _TOOL_CHECKS[alert.rule](change)
            ):
                resolve(session, alert, now, policy=self)
                undone.add(_change_key(alert.tool, first.field, first.new, first.old))
        return undone

    def webhooks_for(self, rank: int) -> list[WebhookConfig]:
        return [webhook for webhook in self.webhooks if rank >= webhook.min_severity.rank]


def alerting_store(
    engine: Engine, config: Config, *, hooks: Sequence[PollHook] = ()
) -> tuple[Store, Alerting]:
    """The store every poller records through (`serve`, `drift-monitor poll`, the API's poll now).

    Its polls' findings take the one path to alerts, with the config's policy and webhooks, in the
    poll's own transaction; `hooks` run before the alerting (e.g. giving a lease back).
    """
    alerting = Alerting.from_config(config)
    store = Store(
        engine,
        attempts_kept=config.monitor.attempts_kept,
        unreachable_after=config.monitor.unreachable_after,
        flapping_returns=config.monitor.flapping_returns,
        flapping_window=timedelta(seconds=config.monitor.flapping_window),
        hooks=[*hooks, alerting],
    )
    return store, alerting


def open_or_attach(
    session: Session,
    server: Server,
    *,
    rule: str,
    severity: Severity,
    tool: str | None = None,
    session_id: str | None = None,
    message: str,
    findings: Sequence[FindingRecord] = (),
    now: datetime,
    policy: Alerting,
) -> Alert:
    """The open alert for this key with `findings` attached, opening (and announcing) it if needed.

    The caller decides whether `severity` deserves an alert (see `Alerting.min_severity`); webhooks
    still hear only of alerts at or above their own `min_severity`.
    """
    key = open_key(server.id, rule, tool, session_id)
    for _ in range(3):
        alert = _open_alert(session, key)
        if alert is not None:
            _attach(session, alert, server, severity, message, findings, now, policy)
            return alert
        # ON CONFLICT: a concurrent transaction that opened this key first wins, and we attach.
        alert_id = session.scalar(
            insert(session)(Alert)
            .values(
                server_id=server.id,
                rule=rule,
                severity=severity.value,
                severity_rank=severity.rank,
                tool=tool,
                session_id=session_id,
                state=AlertState.OPEN,
                open_key=key,
                message=message,
                opened_at=now,
                last_seen_at=now,
            )
            .on_conflict_do_nothing(index_elements=["open_key"])
            .returning(Alert.id)
        )
        if alert_id is not None:
            alert = session.get_one(Alert, alert_id)
            if rule == "listing-flapping":  # what lets a poll of the server skip looking for one
                server.flapping_alert_possible = True
            session.add_all(AlertFinding(alert_id=alert.id, finding_id=f.id) for f in findings)
            alert_event(session, alert, server.name, "opened")
            announce(
                session,
                alert,
                server.name,
                AlertEvent.OPENED,
                policy.webhooks_for(severity.rank),
                now,
                policy,
            )
            return alert
    raise RuntimeError(f"alert {key} kept opening and resolving under us")


def resolve(session: Session, alert: Alert, now: datetime, *, policy: Alerting) -> None:
    """Resolve the alert and tell the webhooks that heard it open; resolving twice does nothing."""
    if alert.state == AlertState.RESOLVED:
        return
    alert.state, alert.resolved_at, alert.open_key = AlertState.RESOLVED, now, None
    if alert.resolved_by is None or alert.resolve_cause is None:  # no person and cause given: cleared
        alert.resolved_by, alert.resolve_cause = None, ResolveCause.CLEARED
    server = session.get_one(Server, alert.server_id)
    cause = resolution(alert.state, alert.resolve_cause, alert.resolved_by, alert.resolve_note)
    alert_event(session, alert, server.name, "resolved", by=alert.resolved_by, cause=cause)
    announce(
        session,
        alert,
        server.name,
        AlertEvent.RESOLVED,
        policy.webhooks_for(alert.severity_rank),
        now,
        policy,
    )


def resolve_matching(
    session: Session,
    server_id: int,
    rule: str,
    tool: str | None = None,
    session_id: str | None = None,
    *,
    now: datetime,
    policy: Alerting,
) -> Alert | None:
    """Resolve the open alert with exactly this key, if there is one, and return it."""
    alert = _open_alert(session, open_key(server_id, rule, tool, session_id))
    if alert is not None:
        resolve(session, alert, now, policy=policy)
    return alert


def open_key(server_id: int, rule: str, tool: str | None, session_id: str | None) -> str:
    """Unambiguous whatever a tool is named, and of fixed length, so the unique index never overflows."""
    digest = hashlib.sha256(json.dumps([tool, session_id]).encode("ascii")).hexdigest()
    return f"{server_id}/{rule}/{digest}"


def _open_alert(session: Session, key: str) -> Alert | None:
    return session.scalar(select(Alert).where(Alert.open_key == key).with_for_update())


def _attach(
    session: Session,
    alert: Alert,
    server: Server,
    severity: Severity,
    message: str,
    findings: Sequence[FindingRecord],
    now: datetime,
    policy: Alerting,
    *,
    lower: bool = False,
) -> None:
    """A repeat: no new webhook, except to webhooks a worse severity now concerns that have not heard
    the alert open yet. With `lower`, a better severity lowers the alert in place, with no webhook."""
    session.add_all(AlertFinding(alert_id=alert.id, finding_id=f.id) for f in findings)
    alert.last_seen_at = max(alert.last_seen_at, now)
    alert.clear_since = None
    if severity.rank > alert.severity_rank or (lower and severity.rank < alert.severity_rank):
        raised = severity.rank > alert.severity_rank
        alert.severity, alert.severity_rank, alert.message = severity.value, severity.rank, message
        alert_event(session, alert, server.name, "raised" if raised else "lowered")
        if raised:
            heard = opened_for(session, alert.id)
            newly = [w for w in policy.webhooks_for(severity.rank) if w.name not in heard]
            announce(session, alert, server.name, AlertEvent.OPENED, newly, now, policy)


def announce(
    session: Session,
    alert: Alert,
    server: str,
    event_type: AlertEvent,
    targets: Iterable[WebhookConfig],
    now: datetime,
    policy: Alerting,
) -> None:
    """Queue the event for those of `targets` whose sinks hear it, in the caller's transaction."""
    targets = [webhook for webhook in targets if hears(webhook, event_type)]
    if not targets:
        return
    session.flush()
    findings = session.scalars(
        select(FindingRecord)
        .join(AlertFinding, AlertFinding.finding_id == FindingRecord.id)
        .where(AlertFinding.alert_id == alert.id)
        .order_by(FindingRecord.id)
        .limit(MAX_FINDINGS)
    ).all()
    payload = alert_payload(event_type, alert, server, findings, policy.base_url, alert_keys(session))
    for webhook in targets:
        enqueue(session, webhook, payload, alert_id=alert.id, now=now, expires_after=policy.delivery_expiry)
    if policy.on_enqueue is not None:
        wake_after_commit(session, policy.on_enqueue)


def _change_key(tool: str | None, field: str | None, old: Any, new: Any) -> str:
    return json.dumps([tool, field, old, new], sort_keys=True)


def _definitions(session: Session, listing_id: int, alerts: Iterable[Alert]) -> dict[str, dict[str, Any]]:
    """The definitions of just the alerts' tools in one listing, by name."""
    names = sorted({alert.tool for alert in alerts if alert.tool is not None})
    rows = session.execute(
        select(ToolDefinition.name, ToolDefinition.definition)
        .join(ListingTool, ListingTool.tool_id == ToolDefinition.id)
        .where(ListingTool.listing_id == listing_id, ToolDefinition.name.in_(names))
    ).all()
    return {name: definition for name, definition in rows}
