"""Polling: fetch many servers concurrently, index each listing once, record it in one transaction.

Network waits run concurrently on the event loop (bounded by `poll_concurrency`); database writes
run on one worker thread, so a slow write never stalls the event loop and writes never contend.
Unchanged listings, the common case, are recorded in batches (`recorder.GroupCommit`); a changed
one in a transaction of its own. A long-running `serve` polls on kept HTTP clients (`clients`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from monitor import tracing
from monitor.collect.client import FetchedListing, Limits, PollError, Target, fetch_listing
from monitor.collect.client.clients import HttpClients
from monitor.collect.guard import guard_listing, refusal_message
from monitor.collect.observe import observe_poll
from monitor.collect.recorder import GroupCommit
from monitor.collect.targets import api_target, limits_for, resolve_targets
from monitor.config import Config, ConfigError
from monitor.core.clients import OWN_NAME, ClientProfile, own_identity
from monitor.core.findings import Finding
from monitor.core.fingerprint import CanonicalListing, NotIJSONError
from monitor.core.listing import ListingError, duplicated_tools, validate_tools
from monitor.core.rules.listings import duplicate_tool_names
from monitor.core.rules.metas import metas_digest, metas_of
from monitor.core.states import PollErrorKind, ServerOrigin
from monitor.store import PollOutcome, Store
from monitor.store.digests import current_digests
from monitor.store.models import Server
from monitor.store.polled import CacheHints, SuccessfulPoll, instructions_digest
from monitor.store.registration import sync_servers
from monitor.store.views import View

log = logging.getLogger("drift_monitor.poller")


@dataclass(frozen=True)
class Job:
    server_id: int
    target: Target
    limits: Limits


P = ParamSpec("P")
OnOutcome = Callable[[PollOutcome], Awaitable[None] | None]


class Poller:
    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drift-monitor-store")
        self.batches = GroupCommit(store, self.writer)
        self.skipped: list[str] = []
        """Why each config server the last `jobs` left out could not be polled."""
        self.clients: HttpClients | None = None
        """Kept HTTP clients (a long-running `serve` sets them); None: each poll makes its own."""
        self.identity_checked: dict[int, float] = {}
        """Per server, when (monotonic) this process last polled it under the monitor's own name, or
        first polled it: the first such poll comes one `identity_check_interval` after that."""
        self.indexed: dict[int, tuple[bytes, str]] = {}
        self.metas_seen: dict[int, str] = {}
        """Per server, the digest of its last poll's `_meta` (`metas_digest`): a poll that saw the very
        text of the last one (`_index`) saw its `_meta` too."""
        """Per server, the digest of its last listing's pages (`FetchedListing.digest`) and that listing's
        fingerprint (two small values per server ever polled by this process or recalled; see `_index`)."""

    def close(self) -> None:
        self.writer.shutdown(wait=True)

    def recall(self, server_ids: Collection[int] | None = None) -> None:
        """Learn from the database the listing each server's current version was polled as (every
        server's, or those of `server_ids`; one query), so a server's first poll in this process
        that sees it again is not indexed again. What this process saw itself is newer and stays."""
        for server_id, known in current_digests(self.store.sessions, server_ids).items():
            self.indexed.setdefault(server_id, known)

    def jobs(self, names: Sequence[str] = ()) -> list[Job]:
        """Jobs for the named servers (default: all: the config's, and those registered over the API or
        from the MCP Registry), registering the config's; unknown names are errors. A config server
        that cannot be resolved is registered but not polled: its reason is in `skipped`."""
        configured = {server.name: server for server in self.config.servers}
        with self.store.sessions() as session:
            query = select(Server).where(Server.origin == ServerOrigin.API).order_by(Server.name)
            registered = {row.name: (row.id, api_target(row)) for row in session.scalars(query)}
        unknown = [name for name in names if name not in configured and name not in registered]
        if unknown:
            raise ConfigError(f"{self.config.source}: no server named {unknown[0]!r}")
        wanted = set(names) if names else set(configured) | set(registered)
        servers = [server for name, server in configured.items() if name in wanted]
        targets, self.skipped = resolve_targets(self.config, servers)
        ids = sync_servers(self.store, servers, datetime.now(UTC))
        jobs = [
            Job(ids[server.name], targets[server.name], limits_for(self.config.monitor, server))
            for server in servers
            if server.name in targets
        ]
        limits = limits_for(self.config.monitor)
        jobs += [
            Job(server_id, target, limits)
            for name, (server_id, target) in registered.items()
            if name in wanted and name not in configured and target is not None
        ]
        self.recall([job.server_id for job in jobs])
        return jobs

    async def poll(self, jobs: Sequence[Job], on_outcome: OnOutcome | None = None) -> list[PollOutcome]:
        """Poll every job once, at most `poll_concurrency` at a time; outcomes in job order."""
        gate = asyncio.Semaphore(self.config.monitor.poll_concurrency)

        async def one(job: Job) -> PollOutcome:
            async with gate:
                outcome = await self.poll_one(job)
            if on_outcome is not None:
                result = on_outcome(outcome)
                if result is not None:
                    await result
            return outcome

        return list(await asyncio.gather(*(one(job) for job in jobs)))

    async def poll_one(self, job: Job) -> PollOutcome:
        """Poll and record one server; counted and, when it matters, logged (`observe_poll`); a span
        when tracing is on, its MCP messages spans under it (`monitor.tracing`)."""
        clock = time.perf_counter()
        with tracing.poll(job.target.name, job.target.transport, job.target.url) as traced:
            outcome = await self._poll_and_record(job, clock)
            traced.outcome(outcome)
        observe_poll(outcome, time.perf_counter() - clock)
        return outcome

    async def _poll_and_record(self, job: Job, clock: float) -> PollOutcome:
        started = datetime.now(UTC)
        try:
            fetched = guard_listing(job.target, await self._fetch(job)).listing
        except PollError as exc:
            return await self._failure(job, exc.kind, exc.message, started, clock)
        try:
            listing, seen_again = self._index(job.server_id, fetched)
        except (ListingError, NotIJSONError, RecursionError) as exc:
            message = "listing is nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raw = raw_payload(fetched.tools)
            duplicates = duplicate_tool_names(job.target.name, duplicated_tools(fetched.tools))
            return await self._failure(
                job, PollErrorKind.MALFORMED, message, started, clock, raw, refusal_findings=duplicates
            )
        own = self._own_identity_due(job)
        views, view_errors = await self._views(job, own)
        checked = own is not None and own.view in {view.profile.view for view in views}
        try:
            outcome = await self._record_success(
                job, fetched, listing, views, started, clock, seen_again, own_checked=checked
            )
        except (SQLAlchemyError, ValueError, RecursionError) as exc:
            # The database refused the listing (a value one of them cannot hold), or recording it
            # failed on what the server sent: the poll is still a recorded outcome, counted towards
            # server-unreachable and shown on the server's page. (A database that is down fails this
            # write too, and the error goes to the scheduler's log.)
            return await self._failure(
                job, PollErrorKind.STORAGE, refusal_message(exc, job.target), started, clock
            )
        outcome.view_errors = view_errors
        outcome.listing_bytes = fetched.listing_bytes
        return outcome

    async def _record_success(
        self,
        job: Job,
        fetched: FetchedListing,
        listing: CanonicalListing,
        views: list[View],
        started: datetime,
        clock: float,
        seen_again: bool,
        *,
        own_checked: bool = False,
    ) -> PollOutcome:
        metas = metas_of(fetched.tools)
        if not seen_again or job.server_id not in self.metas_seen:  # the same text: the same _meta
            self.metas_seen[job.server_id] = metas_digest(metas)
        prepared = None  # without one, the writer computes the diff itself, and records what goes wrong
        if not seen_again:  # a listing seen again is almost always its server's current one: no diff
            with contextlib.suppress(SQLAlchemyError, ValueError, RecursionError):
                prepared = await asyncio.to_thread(self.store.prepare_diff, job.server_id, listing)
        poll = SuccessfulPoll(
            job.server_id,
            listing,
            prepared=prepared,
            started_at=started,
            finished_at=_after(started, clock),
            pages=fetched.pages,
            protocol_version=fetched.protocol_version,
            server_info=fetched.server_info,
            capabilities=fetched.capabilities,
            list_changed_advertised=fetched.list_changed_advertised,
            metas=metas,
            metas_digest=self.metas_seen[job.server_id],
            instructions=fetched.instructions,
            instructions_digest=instructions_digest(fetched.instructions),
            validation_errors=tuple(fetched.validation_errors),
            client=job.target.client,
            views=tuple(views),
            views_complete=own_checked or not self._watches_identity(job),
            recheck_views=own_checked,
            cache=CacheHints(fetched.ttl_ms, fetched.cache_scope, fetched.refetches),
            digest=fetched.digest,
        )
        if not poll.compact:  # views to compare or cache hints to keep: a transaction of its own
            return await self._write(self.store.record, poll)
        # The common case, an unchanged listing, commits with others; a new version on its own.
        return await self.batches.record(poll) or await self._write(self.store.record, poll)

    def _index(self, server_id: int, fetched: FetchedListing) -> tuple[CanonicalListing, bool]:
        """The checked, canonical listing of the fetched tools (`ListingError`, `NotIJSONError` if
        not one), and whether it is the one the server sent last time.

        Most polls see the very listing their server sent last time. Checking and canonicalising
        it costs several times more than the JSON text the client wrote anyway to measure it, and
        both depend on nothing but that text (the same text, the same parsed value), so when its
        digest matches the server's last one the listing takes that listing's fingerprint, and its
        forms are computed only if something reads them (`CanonicalListing.known`).
        """
        digest, tools = fetched.digest, fetched.tools
        last = self.indexed.get(server_id)
        if digest is not None and last is not None and last[0] == digest:
            return CanonicalListing.known(tools, last[1]), True
        listing = CanonicalListing.of(validate_tools(tools))
        if digest is not None:
            self.indexed[server_id] = (digest, listing.fingerprint)
        return listing, False

    async def _fetch(self, job: Job) -> FetchedListing:
        try:
            return await fetch_listing(job.target, job.limits, self.clients)
        except PollError as exc:
            if exc.kind != PollErrorKind.CONNECT or self.clients is None:
                raise
            # A kept connection the server closed as it was reused, or one it closed mid-poll: the
            # poll is tried once more, on a new client and connection.
            self.clients.forget(job.target.name)
        return await fetch_listing(job.target, job.limits, self.clients)

    def _own_identity_due(self, job: Job) -> ClientProfile | None:
        """The monitor's own identity (`own_identity`) when this poll should also poll as it: once every
        `identity_check_interval`, the first time one interval after this process first polled the
        server. None when not due, switched off, or a profile already polls under that name."""
        interval = self.config.monitor.identity_check_interval
        if interval <= 0:
            return None
        now = time.monotonic()
        last = self.identity_checked.setdefault(job.server_id, now)
        if now - last < interval:
            return None
        self.identity_checked[job.server_id] = now
        target = job.target
        return own_identity(target.client, [target.client, *target.views])

    def _watches_identity(self, job: Job) -> bool:
        """Whether the server has an own-identity view polled now and then: a poll without it compares
        only some views, and resolves none of the server's `listing-varies-by-client` alerts."""
        return self.config.monitor.identity_check_interval > 0 and not _configured_own(job)

    async def _views(self, job: Job, own: ClientProfile | None = None) -> tuple[list[View], dict[str, str]]:
        """The server's further client profiles (and `own`, the monitor's own identity, when due), polled
        concurrently, each as its own view; a view whose poll fails is reported and left out, and the
        primary view's result stands."""
        profiles = (*job.target.views, own) if own is not None else job.target.views
        fetches = await asyncio.gather(
            *(self._view(job, profile) for profile in profiles), return_exceptions=True
        )
        views: list[View] = []
        errors: dict[str, str] = {}
        for profile, fetched in zip(profiles, fetches, strict=True):
            if isinstance(fetched, View):
                views.append(fetched)
            elif isinstance(fetched, PollError | ListingError | NotIJSONError):
                errors[profile.view] = str(fetched)
            else:
                raise fetched
        for view, error in errors.items():
            log.warning("poll of %s as client %r failed: %s", job.target.name, view, error)
        return views, errors

    async def _view(self, job: Job, profile: ClientProfile) -> View:
        fetched = await fetch_listing(replace(job.target, client=profile, views=()), job.limits)
        listing = CanonicalListing.of(validate_tools(fetched.tools))
        return View(profile, listing)

    async def _failure(
        self,
        job: Job,
        kind: PollErrorKind,
        message: str,
        started: datetime,
        clock: float,
        raw: str | None = None,
        *,
        refusal_findings: Sequence[Finding] = (),
    ) -> PollOutcome:
        return await self._write(
            self.store.record_failure,
            job.server_id,
            kind,
            message,
            started_at=started,
            finished_at=_after(started, clock),
            raw_payload=raw,
            refusal_findings=refusal_findings,
        )

    async def _write(
        self, method: Callable[P, PollOutcome], *args: P.args, **kwargs: P.kwargs
    ) -> PollOutcome:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.writer, lambda: method(*args, **kwargs))


RAW_PAYLOAD_LIMIT = 1 << 20
"""How much of a listing that could not be read is kept with its failed poll: the first 1 MiB."""


def raw_payload(tools: list[Any]) -> str | None:
    """The tools as received, as ASCII JSON (a NUL or lone surrogate stays an escape, so both databases
    store it), cut to RAW_PAYLOAD_LIMIT; None if even that cannot be written (nesting too deep)."""
    try:
        text = json.dumps({"tools": tools}, ensure_ascii=True)
    except (RecursionError, ValueError):
        return None
    return text if len(text) <= RAW_PAYLOAD_LIMIT else text[:RAW_PAYLOAD_LIMIT] + "\n[cut at 1 MiB]"


def _configured_own(job: Job) -> bool:
    """Whether one of the server's own profiles polls under the monitor's name (at every poll)."""
    return any(profile.name == OWN_NAME for profile in (job.target.client, *job.target.views))


def _after(started: datetime, clock: float) -> datetime:
    """Wall-clock end time measured on the monotonic clock, so a clock step cannot reorder a poll."""
    return started + timedelta(seconds=time.perf_counter() - clock)
