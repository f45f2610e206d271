"""Polling: fetch many servers concurrently, index each listing once, record it in one transaction.

Network waits run concurrently on the event loop (bounded by `poll_concurrency`); database writes
run on one worker thread, so a slow write never stalls the event loop and writes never contend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec

from sqlalchemy.exc import SQLAlchemyError

from monitor.collect.client import FetchedListing, Limits, PollError, Target, fetch_listing
from monitor.collect.guard import guard_listing, refusal_message
from monitor.collect.targets import limits_for, target_for
from monitor.config import Config
from monitor.core.fingerprint import META_KEY, CanonicalListing
from monitor.core.listing import ListingError, validate_tools
from monitor.core.states import PollErrorKind
from monitor.store import PollOutcome, Store


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

    def close(self) -> None:
        self.writer.shutdown(wait=True)

    def jobs(self, names: Sequence[str] = ()) -> list[Job]:
        """Jobs for the named servers (default: all), registering them; unknown names are errors."""
        servers = [self.config.server(name) for name in names] if names else self.config.servers
        targets = [target_for(self.config, server) for server in servers]
        ids = self.store.sync_servers(servers, datetime.now(UTC))
        return [
            Job(ids[server.name], target, limits_for(self.config.monitor, server))
            for server, target in zip(servers, targets, strict=True)
        ]

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
        started = datetime.now(UTC)
        clock = time.perf_counter()
        try:
            fetched = guard_listing(job.target, await fetch_listing(job.target, job.limits)).listing
            listing = CanonicalListing.of(validate_tools(fetched.tools))
        except PollError as exc:
            return await self._failure(job, exc.kind, exc.message, started, clock)
        except (ListingError, RecursionError) as exc:
            message = str(exc) if isinstance(exc, ListingError) else "listing is nested too deeply"
            return await self._failure(job, PollErrorKind.MALFORMED, message, started, clock)
        metas = {tool["name"]: tool[META_KEY] for tool in fetched.tools if META_KEY in tool}
        try:
            return await self._record_success(job, fetched, listing, metas, started, clock)
        except (SQLAlchemyError, ValueError, RecursionError) as exc:
            # The database refused the listing (a value one of them cannot hold), or recording it
            # failed on what the server sent: the poll is still a recorded outcome, counted towards
            # server-unreachable and shown on the server's page. (A database that is down fails this
            # write too, and the error goes to the scheduler's log.)
            return await self._failure(
                job, PollErrorKind.STORAGE, refusal_message(exc, job.target), started, clock
            )

    async def _record_success(
        self,
        job: Job,
        fetched: FetchedListing,
        listing: CanonicalListing,
        metas: dict[str, Any],
        started: datetime,
        clock: float,
    ) -> PollOutcome:
        try:
            prepared = await asyncio.to_thread(self.store.prepare_diff, job.server_id, listing)
        except (SQLAlchemyError, ValueError, RecursionError):
            prepared = None  # the writer computes the diff itself, and records what goes wrong
        return await self._write(
            self.store.record_success,
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
        )

    async def _failure(
        self, job: Job, kind: PollErrorKind, message: str, started: datetime, clock: float
    ) -> PollOutcome:
        return await self._write(
            self.store.record_failure,
            job.server_id,
            kind,
            message,
            started_at=started,
            finished_at=_after(started, clock),
        )

    async def _write(
        self, method: Callable[P, PollOutcome], *args: P.args, **kwargs: P.kwargs
    ) -> PollOutcome:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.writer, lambda: method(*args, **kwargs))


def _after(started: datetime, clock: float) -> datetime:
    """Wall-clock end time measured on the monotonic clock, so a clock step cannot reorder a poll."""
    return started + timedelta(seconds=time.perf_counter() - clock)
