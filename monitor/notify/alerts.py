"""Alerts: findings worth a person's attention, one per (server, tool or session, rule) while open.

`Alerting` is the one path from a finding to an alert, whoever found it: it is the poll hook that
every recorded poll runs in its own transaction (clearing what the poll shows fixed, raising what it
found, holding back a flapping server's changes), and what the host-session checker raises and
clears its standing conditions through. An alert's life (open, attach, raise, lower, resolve) is
`monitor.notify.lifecycle`; which webhooks hear of it, and queueing what they hear, is
`monitor.notify.routing`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence, Set
from datetime import datetime, timedelta
from typing import Any, Unpack

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from monitor.config import Config
from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.rules import CATALOG, TOOL_CHECKS
from monitor.core.states import AlertState
from monitor.notify import silences
from monitor.notify.lifecycle import attach, open_alert, open_key, open_or_attach, resolve, resolve_matching
from monitor.notify.routing import Routing, RoutingOptions
from monitor.sinks.base import WebhookConfig
from monitor.store.flapping import settled_changes
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

_SERVER_RULES = [rule for rule in CATALOG.values() if rule.scope == "server"]
"""The rules any recorded poll can show ended (`Rule.ends_with`); others judge so themselves (`cleared`)."""


class Alerting(Routing):
    """The alert policy and poll hook: which findings open alerts, and which webhooks hear of them."""

    def __init__(
        self,
        webhooks: Sequence[WebhookConfig] = (),
        *,
        clear_for: timedelta = timedelta(seconds=15),
        flapping_window: timedelta = timedelta(hours=1),
        **routing: Unpack[RoutingOptions],
    ) -> None:
        super().__init__(webhooks, **routing)
        self.clear_for = clear_for
        """How long a re-checked condition must stay clear before its alert resolves: one full check."""
        self.flapping_window = flapping_window
        """A flapping server has settled once one listing has lasted this long."""

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
            flapping = open_alert(session, open_key(poll.server.id, "listing-flapping", None, None))
            poll.server.flapping_alert_possible = flapping is not None
        facts = poll.facts
        for rule in _SERVER_RULES:
            if rule.ends_with(facts):
                resolve_matching(session, poll.server.id, rule.id, now=poll.now, policy=self)
        for gone in poll.cleared:
            resolve_matching(session, poll.server.id, gone.rule, gone.tool, now=poll.now, policy=self)
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
            findings = [f for f in findings if f.rule not in TOOL_CHECKS]
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
        alert = open_alert(session, open_key(server.id, finding.rule, finding.tool, session_id))
        if alert is not None and alert.severity_rank > finding.severity.rank:
            records = store_findings(session, server.id, [finding], now)
            attach(session, alert, server, finding.severity, finding.message, records, now, self, lower=True)
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
        alert = open_alert(session, open_key(server_id, rule, None, session_id))
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
        back is the fix, so it must not open the opposite alert (read-only-claimed) as well. An alert
        raised at first sight (the server's first listing: no starting point) is judged against the
        tool's absence, as first sight judged it.
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
            .outerjoin(Snapshot, Snapshot.id == FindingRecord.from_snapshot_id)
            .where(
                Alert.server_id == server_id,
                Alert.state.in_(AlertState.unresolved()),
                Alert.tool.is_not(None),
                Alert.rule.in_(list(TOOL_CHECKS)),
            )
            .with_for_update(of=Alert)
        ).all()
        current = _definitions(session, listing_id, [alert for alert, _, _ in rows])
        baselines: dict[int | None, dict[str, dict[str, Any]]] = {None: {}}
        undone: set[str] = set()
        for alert, first, baseline_id in rows:
            if alert.tool is None:
                continue
            if baseline_id not in baselines and baseline_id is not None:
                same_start = [other for other, _, start in rows if start == baseline_id]
                baselines[baseline_id] = _definitions(session, baseline_id, same_start)
            change = ToolChange(alert.tool, baselines[baseline_id].get(alert.tool), current.get(alert.tool))
            if not any(
                finding.rule == alert.rule and finding.severity.rank >= self.min_severity.rank
                for finding in TOOL_CHECKS[alert.rule](change)
            ):
                resolve(session, alert, now, policy=self)
                undone.add(_change_key(alert.tool, first.field, first.new, first.old))
        return undone


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
