"""The poll transaction: one transaction per poll, content-addressed listings, versions as spans.

Every write of one poll (tool definitions, listing, snapshot span, findings, attempt, server
state) commits together or not at all, so a crash mid-poll leaves no half snapshot. Unchanged
polls are compact marks, and may share a transaction (`monitor.store.batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session, sessionmaker

from monitor.core.diff import diff_changes
from monitor.core.findings import Finding, ToolChange
from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules import listings, metas, servers
from monitor.core.rules.catalog import Cleared, Verdict, judged
from monitor.core.rules.servers import WatchState
from monitor.core.states import PollErrorKind
from monitor.store.flapping import returns_since
from monitor.store.generations import decisions_changed
from monitor.store.listings import changes_against, store_listing
from monitor.store.marks import mark, write_marks
from monitor.store.models import (
    FindingRecord,
    Listing,
    PollAttempt,
    Server,
    Snapshot,
)
from monitor.store.modeltext import instructions_in_place, judge_text
from monitor.store.polled import (
    PollOutcome,
    PreparedDiff,
    RecordedPoll,
    SuccessfulPoll,
    extras_changed,
    metas_changed,
    seen_again,
    succeeded,
)
from monitor.store.statereads import StateReads
from monitor.store.views import View, ViewComparison, not_recorded_last, not_yet_found, record_views


class PollHook(Protocol):
    """Work that must commit with the poll that caused it (alerts and their outbox rows, leases)."""

    def after_poll(self, session: Session, poll: RecordedPoll) -> None:
        """Called inside the poll's transaction, after its findings are stored."""


class Store:
    def __init__(
        self,
        engine: Engine,
        *,
        attempts_kept: int = 100,
        unreachable_after: int = 3,
        flapping_returns: int = 3,
        flapping_window: timedelta = timedelta(hours=1),
        hooks: Sequence[PollHook] = (),
    ) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self.reads = StateReads(engine)
        """The statements every decision runs, on connections kept for them."""
        self.attempts_kept = attempts_kept
        self.unreachable_after = unreachable_after
        self.flapping_returns, self.flapping_window = flapping_returns, flapping_window
        self.hooks = list(hooks)

    def _run_hooks(self, session: Session, poll: RecordedPoll) -> None:
        for hook in self.hooks:
            hook.after_poll(session, poll)

    def record(self, poll: SuccessfulPoll) -> PollOutcome:
        """Store a successful poll in its own transaction: a new version only when the listing changed.

        An unchanged `compact` poll is a mark; any other (further client views, cache hints) keeps
        its attempt row and view spans. A listing that breaks the MCP schema
        (`poll.validation_errors`) is stored like any other, marked with the errors, and raises
        `listing-invalid`: what hosts reject is exactly what to review. `poll.prepared` (from
        `prepare_diff`) spares the transaction the diff while the server's current version is still
        the one it was computed against.
        """
        with self.sessions.begin() as session:
            server = _lock_server(session, poll.server_id)
            previous = _current_version(session, poll.server_id)
            unchanged = previous is not None and previous.fingerprint == poll.listing.fingerprint
            if (
                previous is not None
                and unchanged
                and poll.compact
                and not extras_changed(previous.snapshot, poll)
            ):
                outcome, row = self.record_unchanged(session, server, previous.snapshot, poll)
                write_marks(session, [row])
                return outcome
            if previous is not None and unchanged:
                snapshot, new_version = previous.snapshot, False
                seen_again(snapshot, poll)
            else:
                snapshot, new_version = _new_version(session, server, previous, poll), True
            succeeded(server, poll)
            findings: list[Finding] = []
            records: list[FindingRecord] = []
            cleared: frozenset[Cleared] = frozenset()
            if new_version:
                findings, cleared = self._changes(session, server, previous, snapshot, poll)
                findings += _meta_changes(server, previous.snapshot if previous else None, poll, findings)
                records = store_findings(
                    session,
                    server.id,
                    findings,
                    poll.finished_at,
                    from_snapshot=previous.snapshot.id if previous else None,
                    to_snapshot=snapshot.id,
                )
            elif extras_changed(snapshot, poll):
                findings = _meta_changes(server, snapshot, poll, [])
                snapshot.metas, snapshot.metas_digest = poll.metas or None, poll.metas_digest
                told, cleared = instructions_in_place(server, snapshot, poll)
                findings += told
                records = store_findings(
                    session, server.id, findings, poll.finished_at, to_snapshot=snapshot.id
                )
            compared = _compare_views(session, server, snapshot, poll)
            if compared.changed:  # decisions judge every view (monitor.approvals.cache)
                decisions_changed(server)
            in_views = not_yet_found(compared.changes, findings)
            if in_views or compared.findings:
                findings += in_views + compared.findings
                records += store_findings(
                    session,
                    server.id,
                    in_views + compared.findings,
                    poll.finished_at,
                    to_snapshot=snapshot.id,
                )
            recorded = RecordedPoll(
                server, poll.finished_at, records, snapshot, new_version, cleared, compared.agreeing
            )
            self._run_hooks(session, recorded)
            self._add_attempt(session, _attempt(poll, snapshot))
            return PollOutcome(
                server=server.name,
                ok=True,
                tool_count=len(poll.listing.tools),
                fingerprint=poll.listing.fingerprint,
                version=snapshot.version,
                new_version=new_version,
                findings=findings,
            )

    def _changes(
        self,
        session: Session,
        server: Server,
        previous: CurrentVersion | None,
        snapshot: Snapshot,
        poll: SuccessfulPoll,
    ) -> tuple[list[Finding], frozenset[Cleared]]:
        """What a new version raises: the diff against the previous one, the server rules that judge a
        change (silent, flapping), the listing rules and what its text raises (`judge_text`); and what
        it showed cleared."""
        findings: list[Finding] = []
        verdicts: list[Verdict] = []
        changes: list[ToolChange] = []
        if previous is not None:
            before = previous.snapshot
            watch = WatchState(
                server.watch_connected_since,
                server.last_notification_at,
                poll.list_changed_advertised,
                shares_polled_instance=server.transport != "stdio",
            )
            prepared = poll.prepared
            if prepared is not None and prepared.from_fingerprint == previous.fingerprint:
                changes, findings = prepared.changes, list(prepared.findings)
            else:
                changes = changes_against(session, before.listing_id, poll.listing)
                findings = list(diff_changes(changes))
            returns = returns_since(session, server.id, poll.finished_at - self.flapping_window)
            flapping = servers.listing_flapping(
                server.name,
                returns.count,
                self.flapping_returns,
                self.flapping_window,
                returns.versions,
                len(returns.fingerprints),
                findings,
            )
            findings += [flapping] if flapping is not None else []
            verdicts += [
                servers.listing_changed_silently(server.name, snapshot.version, watch, before.last_seen),
                listings.changed_without_version_bump(
                    server.name, snapshot.version, before.server_info, poll.server_info
                ),
            ]
        verdicts.append(listings.listing_invalid(server.name, snapshot.version, poll.validation_errors))
        raised, cleared = judged(verdicts)
        told, text_cleared = judge_text(
            session, server, previous.snapshot if previous else None, snapshot, poll, changes
        )
        return findings + raised + told, cleared | text_cleared

    def record_unchanged(
        self, session: Session, server: Server, snapshot: Snapshot, poll: SuccessfulPoll
    ) -> tuple[PollOutcome, dict[str, Any]]:
        """A `compact` poll that saw `snapshot`'s listing again, in the caller's transaction: the span
        (and the primary view's) grows, the server's state and hooks are updated, and its compact mark
        is returned for the caller to write."""
        seen_again(snapshot, poll)
        failing = server.consecutive_failures > 0
        succeeded(server, poll)
        if poll.client is not None:  # no further views: nothing to compare, the primary span grows
            primary = View(poll.client, poll.listing)
            record_views(
                session,
                server_id=server.id,
                server_name=server.name,
                primary=primary,
                primary_listing_id=snapshot.listing_id,
                others=(),
                now=poll.finished_at,
                store_listing=store_listing,
            )
        recorded = RecordedPoll(server, poll.finished_at, (), snapshot, False, was_failing=failing)
        self._run_hooks(session, recorded)
        row = mark(server.id, server.polls_marked, self.attempts_kept, poll.started_at, poll.finished_at)
        server.polls_marked += 1
        outcome = PollOutcome(
            server=server.name,
            ok=True,
            tool_count=len(poll.listing.tools),
            fingerprint=poll.listing.fingerprint,
            version=snapshot.version,
        )
        return outcome, row

    def record_listen_ack(self, server_id: int, honored: bool, now: datetime) -> None:
        """A 2026-07-28 watch session's `subscriptions/listen` acknowledgement (`notifications-declined`)."""
        with self.sessions.begin() as session:
            server = _lock_server(session, server_id)
            raised, cleared = judged(
                [
                    servers.notifications_declined(
                        server.name,
                        honored,
                        server.tools_list_changed_honored,
                        server.list_changed_advertised,
                    )
                ]
            )
            server.tools_list_changed_honored = honored
            records = store_findings(session, server_id, raised, now)
            self._run_hooks(session, RecordedPoll(server, now, records, cleared=cleared, listen_ack=True))

    def prepare_diff(self, server_id: int, listing: CanonicalListing) -> PreparedDiff | None:
        """The findings from the server's current version to `listing`, or None when it is unchanged
        or the first. Read-only and outside the writer: a large diff delays no other server's record."""
        with self.sessions() as session:
            previous = session.execute(
                select(Snapshot.listing_id, Listing.fingerprint)
                .join(Listing, Snapshot.listing_id == Listing.id)
                .where(Snapshot.server_id == server_id)
                .order_by(Snapshot.version.desc())
                .limit(1)
            ).first()
            if previous is None or previous[1] == listing.fingerprint:
                return None
            changes = changes_against(session, previous[0], listing)
            return PreparedDiff(previous[1], changes, list(diff_changes(changes)))

    def record_failure(
        self,
        server_id: int,
        kind: str,
        message: str,
        *,
        started_at: datetime,
        finished_at: datetime,
        raw_payload: str | None = None,
        refusal_findings: Sequence[Finding] = (),
    ) -> PollOutcome:
        """Store a failed poll; the Nth failure in a row raises `server-unreachable`.

        A failure of a kind in `PollErrorKind.refused_answers()` is an answer the monitor refused:
        the server is unverifiable until a listing it can store arrives (decisions deny), and
        `refusal_findings` (what the refused listing showed, e.g. `duplicate-tool-name`) are stored
        when the refusal is new or its reason changed, not again at every poll.
        `raw_payload`: what a server sent that could not be read as a listing, kept for review
        (the caller bounds it, see `RAW_PAYLOAD_LIMIT`).
        """
        with self.sessions.begin() as session:
            server = _lock_server(session, server_id)
            server.consecutive_failures += 1
            server.last_poll_at = finished_at
            server.last_error = f"{kind}: {message}"
            unreachable = servers.server_unreachable(
                server.name, server.consecutive_failures, self.unreachable_after, kind, message
            )
            findings = [unreachable] if unreachable else []
            if kind in PollErrorKind.refused_answers():
                if server.unverifiable_reason != server.last_error:
                    findings += refusal_findings
                server.unverifiable_since = server.unverifiable_since or finished_at
                server.unverifiable_reason = server.last_error
            records = store_findings(session, server_id, findings, finished_at)
            self._run_hooks(session, RecordedPoll(server, finished_at, records))
            self._add_attempt(
                session,
                PollAttempt(
                    server_id=server_id,
                    started_at=started_at,
                    duration_ms=_ms(started_at, finished_at),
                    ok=False,
                    error_kind=kind,
                    error=message,
                    raw_payload=raw_payload,
                ),
            )
            return PollOutcome(
                server=server.name, ok=False, error_kind=kind, error=message, findings=findings
            )

    def _add_attempt(self, session: Session, attempt: PollAttempt) -> None:
        """Record the attempt and trim the server's successful attempts to the newest `attempts_kept`."""
        session.add(attempt)
        session.flush()
        if not attempt.ok:
            return
        cutoff = session.scalar(
            select(PollAttempt.id)
            .where(PollAttempt.server_id == attempt.server_id, PollAttempt.ok.is_(True))
            .order_by(PollAttempt.id.desc())
            .offset(self.attempts_kept)
            .limit(1)
        )
        if cutoff is not None:
            session.execute(
                delete(PollAttempt).where(
                    PollAttempt.server_id == attempt.server_id,
                    PollAttempt.ok.is_(True),
                    PollAttempt.id <= cutoff,
                )
            )

    def server_id(self, name: str) -> int | None:
        with self.sessions() as session:
            return session.scalar(select(Server.id).where(Server.name == name))


class CurrentVersion(NamedTuple):
    """A server's current version and its listing's fingerprint, as a poll's transaction read them."""

    snapshot: Snapshot
    fingerprint: str


def _current_version(session: Session, server_id: int) -> CurrentVersion | None:
    row = session.execute(
        select(Snapshot, Listing.fingerprint)
        .join(Listing, Snapshot.listing_id == Listing.id)
        .where(Snapshot.server_id == server_id)
        .order_by(Snapshot.version.desc())
        .limit(1)
    ).first()
    return CurrentVersion(row[0], row[1]) if row is not None else None


def _new_version(
    session: Session, server: Server, previous: CurrentVersion | None, poll: SuccessfulPoll
) -> Snapshot:
    """A new version holding the poll's listing (stored once, content-addressed); decisions about the
    server's tools rest on it from this transaction's commit on."""
    decisions_changed(server)
    snapshot = Snapshot(
        server_id=poll.server_id,
        version=(previous.snapshot.version + 1) if previous else 1,
        listing_id=store_listing(session, poll.listing, poll.finished_at),
        metas=poll.metas or None,
        metas_digest=poll.metas_digest,
        instructions=poll.instructions,
        instructions_digest=poll.instructions_digest,
        first_seen=poll.finished_at,
        last_seen=poll.finished_at,
        poll_count=1,
        protocol_version=poll.protocol_version,
        server_info=poll.server_info,
        validation_errors=list(poll.validation_errors) or None,
        listing_digest=poll.digest,
    )
    session.add(snapshot)
    session.flush()
    return snapshot


def _compare_views(
    session: Session, server: Server, snapshot: Snapshot, poll: SuccessfulPoll
) -> ViewComparison:
    """The poll's client views, kept beside its primary one, and how they differ."""
    if poll.client is None:
        return ViewComparison()
    compared = record_views(
        session,
        server_id=server.id,
        server_name=server.name,
        primary=View(poll.client, poll.listing),
        primary_listing_id=snapshot.listing_id,
        others=poll.views,
        now=poll.finished_at,
        store_listing=store_listing,
        complete=poll.views_complete,
        recheck=poll.recheck_views,
    )
    if poll.recheck_views and compared.findings:
        compared.findings = not_recorded_last(session, server.id, compared.findings)
    return compared


def _meta_changes(
    server: Server, before: Snapshot | None, poll: SuccessfulPoll, found: Sequence[Finding]
) -> list[Finding]:
    """`meta-changed` for each tool the poll lists whose `_meta` is not what `before` (this version, or
    the previous one) kept; none when `before` kept none (stored before migration 0020) or for a tool
    this poll added."""
    if before is None or before.metas_digest is None or not metas_changed(before, poll):
        return []
    added = {f.tool for f in found if f.rule == "tool-added"}
    tools = [name for name in poll.listing.tools if name not in added]
    return metas.meta_changes(server.name, before.metas or {}, poll.metas, tools)


def _attempt(poll: SuccessfulPoll, snapshot: Snapshot) -> PollAttempt:
    return PollAttempt(
        server_id=poll.server_id,
        started_at=poll.started_at,
        duration_ms=_ms(poll.started_at, poll.finished_at),
        ok=True,
        snapshot_id=snapshot.id,
        pages=poll.pages,
        ttl_ms=poll.cache.ttl_ms,
        cache_scope=poll.cache.cache_scope,
        refetches=poll.cache.refetches,
    )


def _lock_server(session: Session, server_id: int) -> Server:
    """The server row, locked on PostgreSQL so concurrent writers of one server take turns."""
    server = session.scalar(select(Server).where(Server.id == server_id).with_for_update())
    if server is None:
        raise LookupError(f"server id {server_id} is not registered")
    return server


def store_findings(
    session: Session,
    server_id: int,
    findings: Sequence[Finding],
    at: datetime,
    *,
    from_snapshot: int | None = None,
    to_snapshot: int | None = None,
) -> list[FindingRecord]:
    """Store findings of one server (with the snapshot pair a diff came from) in the caller's transaction."""
    records = [
        FindingRecord(
            server_id=server_id,
            from_snapshot_id=from_snapshot,
            to_snapshot_id=to_snapshot,
            detected_at=at,
            rule=finding.rule,
            severity=finding.severity.value,
            severity_rank=finding.severity.rank,
            tool=finding.tool,
            field=finding.field,
            old=finding.old,
            new=finding.new,
            message=finding.message,
            detail=finding.detail,
        )
        for finding in findings
    ]
    session.add_all(records)
    session.flush()
    return records


def _ms(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() * 1000
