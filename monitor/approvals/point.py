"""The decision point of one process: names, the decision cache, freshness, the writes and the counters.

Every adapter (the decision API, each host's hook, the ToolHive PDP) asks this one object, so they
answer alike, count alike in /metrics and keep their non-allow answers alike. A decision costs one
indexed read when nothing changed; only non-allow answers, session beats and unmonitored names write,
and they are written off the request path (`monitor.approvals.recorder`).

It fails closed: a verdict rests on the cached listing only while the monitor verified that listing
recently (`monitor.approvals.policy.verified`); a host's name is matched the host's way against every
monitored name and alias, longest first; a name that matches nothing is `Unmonitored`, which each
adapter answers as `[decisions] unmonitored` says, and which is counted and listed, never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from monitor import tracing
from monitor.approvals.cache import INLINE, MAX_KEPT, DecisionView, Lookup, NotReady, ServerState, ServerView
from monitor.approvals.counts import DecisionCounts
from monitor.approvals.names import Normalise, ServerNames, exact_name, tool_candidates
from monitor.approvals.policy import Verdict, Verification, verified
from monitor.approvals.recorder import DecisionRecorder, DecisionWrite, SessionBeats, UnmonitoredCall
from monitor.config import Config
from monitor.core.ijson import storable
from monitor.core.states import DecisionKind
from monitor.metrics import DECISION_DURATION
from monitor.store import Store

STALE_AFTER_INTERVALS = 3
"""By default a server's last good listing is trusted for this many of its poll intervals."""


@dataclass(frozen=True)
class Answer:
    """The decision about one tool of one monitored server."""

    server: ServerView
    tool: str
    verdict: Verdict

    def to_dict(self) -> dict[str, object]:
        return {
            "server": self.server.name,
            "tool": self.tool,
            **self.verdict.to_dict(),
            "fingerprint": self.server.current_fingerprint,
        }


@dataclass(frozen=True)
class Unmonitored:
    """A host asked about a server the monitor does not know: its name as the host wrote it."""

    name: str


PollNow = Callable[[str], Awaitable[object]]

log = logging.getLogger(__name__)


P = ParamSpec("P")
R = TypeVar("R")


def _timed(decide: Callable[P, R]) -> Callable[P, R]:
    """A decision's duration in `DECISION_DURATION`, once it is decided: an inline attempt that had to
    be asked again on the lane's threads (`NotReady`) is timed there, once. (A wrapper, not a context
    manager: on the event loop, where every call is decided, that costs a generator a decision.)"""

    @functools.wraps(decide)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        start = time.perf_counter()
        decided = decide(*args, **kwargs)
        DECISION_DURATION.observe(time.perf_counter() - start)
        return decided

    return timed


class DecisionPoint:
    """What every adapter asks: one per web app, kept on `app.state.decision_point`."""

    def __init__(
        self,
        store: Store,
        config: Config,
        clock: Callable[[], datetime],
        poll_now: PollNow | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.view = DecisionView(store.engine, store.reads)
        self.beats = SessionBeats()
        self.recorder = DecisionRecorder(store, keep=config.monitor.decisions_kept)
        self.counts = DecisionCounts(lambda: self.recorder.dropped)
        self.refresher = Refresher(poll_now, config) if config.decisions.refresh_on_decision else None
        self._configured = _configured_names(config)
        self._max_ages = {
            s.name: s.decision_max_age for s in config.servers if s.decision_max_age is not None
        }
        self._ages: dict[tuple[str, float | None], timedelta] = {}
        self._when_stale = DecisionKind(config.decisions.stale_decision)
        self._indexes: dict[tuple[int, Normalise], ServerNames] = {}
        self._lock = threading.Lock()
        self._stop_warming = threading.Event()
        self.warmed = threading.Event()

    @_timed
    def decide(
        self,
        server: str,
        tool: str,
        *,
        fingerprint: str | None = None,
        session_id: str | None = None,
        client: str | None = None,
        client_capabilities: Mapping[str, Any] | None = None,
    ) -> Answer | None:
        """The answer about `tool` of the server the monitor calls `server` (or an alias of it);
        None when the monitor knows no such server. `client_capabilities`, what the host declared to
        the server, picks the client view the answer is judged on (unknown: the strictest view's)."""
        found = self._named(server, exact_name)
        if isinstance(found, Unmonitored):
            return None
        return self._answer(found, tool, exact_name, fingerprint, session_id, client, client_capabilities)

    @_timed
    def decide_for_host(
        self,
        host: str,
        qualified: str,
        *,
        prefix: str,
        separator: str,
        normalise: Normalise,
        session_id: str | None = None,
        client: str | None = None,
    ) -> Answer | Unmonitored:
        """The answer about a tool a host names `<prefix><server><separator><tool>`, its server found
        the host's way (`monitor.approvals.names`)."""
        for _ in range(3):  # the names changed while they were matched: match again
            generation, index = self._index(normalise)
            match = index.split(qualified, prefix, separator)
            if match is None:
                if self.view.names_generation() != generation:
                    self._index(normalise, stale=generation)
                    continue
                return self._unmonitored(_first(qualified, prefix, separator), host)
            lookups = [self._lookup(server) for server in match.servers]
            if any(lookup.names_generation != generation for lookup in lookups):
                self._index(normalise, stale=generation)
                continue
            answers = [
                self._answer(lookup, match.tool, normalise, None, session_id, client)
                for lookup in lookups
                if lookup.view is not None
            ]
            if answers:
                return strictest(answers)
        return self._unmonitored(_first(qualified, prefix, separator), host)

    @_timed
    def decide_for_named_host(
        self,
        host: str,
        server: str,
        tool: str,
        *,
        normalise: Normalise,
        session_id: str | None = None,
        client: str | None = None,
    ) -> Answer | Unmonitored:
        """The answer about a tool whose server a host names on its own (ToolHive, Gemini's context)."""
        found = self._named(server, normalise)
        if isinstance(found, Unmonitored):
            return self._unmonitored(server, host)
        return self._answer(found, tool, normalise, None, session_id, client)

    def warm(self) -> None:
        """Builds the view of every monitored server, ahead of the first call about it (run on a
        thread of its own when the app starts). A view built at the first call is built on the lane's
        threads while every other call about that server waits for it: under a burst right after a
        start, most calls would wait past `max_wait` and get the fail-closed answer instead of their
        own. `stop_warming()` ends it early; `warmed` is set once it has ended."""
        try:
            _, names = self.view.names()
            for name in names:
                if self._stop_warming.is_set():
                    break
                with self.view.sessions() as session:  # a pooled connection, given back: none kept
                    self.view.server(name, session)
        except SQLAlchemyError as exc:  # the first call about each server builds its view instead
            log.warning("could not build the decision views at start: %s", exc)
        finally:
            self.warmed.set()

    def stop_warming(self) -> None:
        self._stop_warming.set()

    def current(
        self, server: str, session: Session | None = None
    ) -> tuple[ServerView, dict[str, Verdict]] | None:
        """Every current tool's decision, as a host would get it now, for pages and gateways; nothing
        counted or kept. None: no server of that name. A page passes its request's `session`, so the
        reads share its connection."""
        lookup = self.view.server(server, session)
        if lookup.view is None or lookup.state is None:
            return None
        verification = self._verification(lookup.view, lookup.state)
        now = self.clock()
        names = set(lookup.view.tools).union(*(view.tools for view in lookup.view.views))
        return lookup.view, {
            name: verified(lookup.view.verdict(name), verification, now) for name in sorted(names)
        }

    def listed_for_named_host(
        self, server: str, *, normalise: Normalise
    ) -> dict[str, DecisionKind] | Unmonitored:
        """The decision about every tool the monitor's current listing of a server (named the host's
        way) holds, for a gateway filtering `tools/list`; nothing counted or kept (a listing is no call).
        When the name means several servers, a tool is at the strictest of them, and a deny where one
        of them lacks it."""
        found = self._named(server, normalise)
        if isinstance(found, Unmonitored):
            return found
        decisions: dict[str, DecisionKind] = {}
        for index, lookup in enumerate(found):
            view, state = lookup.view, lookup.state
            assert view is not None and state is not None
            verification, now = self._verification(view, state), self.clock()
            listed = {
                normalise(name): verified(view.verdict(name), verification, now).decision
                for name in view.tools
            }
            for name in decisions.keys() | listed.keys():
                here = listed.get(name, DecisionKind.DENY)
                before = decisions.get(name, DecisionKind.DENY if index else here)
                decisions[name] = max(here, before, key=lambda kind: kind.strictness)
        return decisions

    # --- the steps ---------------------------------------------------------------------------------

    def _named(self, server: str, normalise: Normalise) -> list[Lookup] | Unmonitored:
        for _ in range(3):
            generation, index = self._index(normalise)
            names = index.server(server)
            if not names and self.view.names_generation() != generation:
                self._index(normalise, stale=generation)
                continue
            lookups = [self._lookup(name) for name in names]
            if any(lookup.names_generation != generation for lookup in lookups):
                self._index(normalise, stale=generation)
                continue
            found = [lookup for lookup in lookups if lookup.view is not None]
            return found or Unmonitored(server)
        return Unmonitored(server)

    def _lookup(self, server: str) -> Lookup:
        lookup = self.view.server(server)
        refresher, now = self.refresher, self.clock()
        if refresher is not None and lookup.state is not None and refresher.due(lookup.state, now):
            if INLINE.get():
                raise NotReady(server)  # a refresh waits for a poll, which runs on the event loop
            refresher.refresh(server, now)
            lookup = self.view.server(server)
        return lookup

    def _index(self, normalise: Normalise, stale: int | None = None) -> tuple[int, ServerNames]:
        """The names normalised the host's way, as of the names' generation (read again when a lookup
        saw `stale` outdated)."""
        generation, names = self.view.names(refresh=stale is not None)
        key = (generation, normalise)
        with self._lock:
            index = self._indexes.get(key)
        if index is None:
            merged = {name: [*aliases, *self._configured.get(name, ())] for name, aliases in names.items()}
            index = ServerNames(merged, normalise)
            with self._lock:
                self._indexes = {k: v for k, v in self._indexes.items() if k[0] == generation}
                self._indexes[key] = index
        return generation, index

    def _answer(
        self,
        lookups: Lookup | list[Lookup],
        tool: str,
        normalise: Normalise,
        fingerprint: str | None,
        session_id: str | None,
        client: str | None,
        declared: Mapping[str, Any] | None = None,
    ) -> Answer:
        """The strictest answer over the servers (and the listed tools) the host's names may mean."""
        answers = []
        for lookup in lookups if isinstance(lookups, list) else [lookups]:
            view, state = lookup.view, lookup.state
            assert view is not None and state is not None
            verification, now = self._verification(view, state), self.clock()
            listed = set(view.tools).union(*(v.tools for v in view.views)) if view.views else view.tools
            for name in tool_candidates(tool, listed, normalise) or [tool]:
                verdict = verified(view.verdict(name, declared, client), verification, now)
                if fingerprint is not None and not view.holds(fingerprint, declared, client):
                    verdict = verdict.stale()
                answers.append(Answer(view, name, verdict))
        answer = strictest(answers)
        self._record(answer, fingerprint, session_id, client)
        return answer

    def _verification(self, view: ServerView, state: ServerState) -> Verification:
        return Verification(
            last_verified=state.last_verified,
            unverifiable_reason=state.unverifiable_reason,
            max_age=self._max_age(view.name, state.interval_seconds),
            when_stale=self._when_stale,
        )

    def _max_age(self, server: str, interval: float | None) -> timedelta:
        """How old `server`'s last verification may be (its own setting, `[decisions] max_age`, or a
        number of its poll intervals), kept per server and interval: every decision asks."""
        key = (server, interval)
        age = self._ages.get(key)
        if age is None:
            configured = self._max_ages.get(server, self.config.decisions.max_age)
            if configured is None:
                configured = STALE_AFTER_INTERVALS * (interval or self.config.monitor.poll_interval)
            age = timedelta(seconds=configured)
            if len(self._ages) >= MAX_KEPT:
                self._ages.clear()
            self._ages[key] = age
        return age

    def _record(
        self, answer: Answer, fingerprint: str | None, session_id: str | None, client: str | None
    ) -> None:
        view, verdict = answer.server, answer.verdict
        self.counts.add(verdict)
        tracing.decided(view.name, answer.tool, verdict, client)  # a span, when tracing is on
        holding = fingerprint or view.current_fingerprint
        beat_due = (
            session_id is not None and holding is not None and self.beats.due(view.name, session_id, holding)
        )
        if verdict.decision != DecisionKind.ALLOW or beat_due:
            self.recorder.submit(
                DecisionWrite(
                    server_id=view.server_id,
                    server=view.name,
                    tool=answer.tool,
                    verdict=verdict if verdict.decision != DecisionKind.ALLOW else None,
                    session_id=session_id,
                    client=client,
                    holding=holding if beat_due else None,
                    at=self.clock(),
                )
            )

    def _unmonitored(self, name: str, host: str) -> Unmonitored:
        self.counts.add_unmonitored(host)
        if storable(name):
            self.recorder.submit(UnmonitoredCall(name, host, self.clock()))
        return Unmonitored(name)


def _first(qualified: str, prefix: str, separator: str) -> str:
    """The likeliest server name in a qualified tool name no monitored server matched: the part up to
    the first separator (what the unmonitored list shows)."""
    rest = qualified[len(prefix) :] if qualified.startswith(prefix) else qualified
    return rest.split(separator, 1)[0] or qualified


def strictest(answers: list[Answer]) -> Answer:
    """The answer that stops the most (deny over ask over allow); the first among equals."""
    return max(answers, key=lambda answer: answer.verdict.decision.strictness)


def _configured_names(config: Config) -> dict[str, list[str]]:
    """Aliases the config gives: each `[[servers]]` entry's, and `[aliases]` for any server."""
    names: dict[str, list[str]] = {server.name: list(server.aliases) for server in config.servers}
    for name, aliases in config.aliases.items():
        names.setdefault(name, []).extend(aliases)
    return names


class Refresher:
    """`[decisions] refresh_on_decision`: a decision about a server last polled longer ago than that
    polls it first, at most once per that interval per server, waiting at most `refresh_wait`."""

    def __init__(self, poll_now: PollNow | None, config: Config) -> None:
        self.poll_now = poll_now
        self.after = float(config.decisions.refresh_on_decision or 0)
        self.wait = config.decisions.refresh_wait
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop polls run on (set by the app when it starts)."""
        self._lock = threading.Lock()
        self._asked: dict[str, datetime] = {}

    def due(self, state: ServerState, now: datetime) -> bool:
        if self.poll_now is None or self.loop is None:
            return False
        last = state.last_polled
        return last is None or (now - last).total_seconds() > self.after

    def refresh(self, server: str, now: datetime) -> None:
        """Poll `server` now unless it was asked for within the interval; wait for it, bounded."""
        with self._lock:
            asked = self._asked.get(server)
            if asked is not None and (now - asked).total_seconds() < self.after:
                return
            if len(self._asked) > MAX_KEPT:
                self._asked.clear()
            self._asked[server] = now
        if self.poll_now is None or self.loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(_polled(self.poll_now, server), self.loop)
        with contextlib.suppress(Exception):  # a failed or slow refresh leaves the answer to freshness
            future.result(timeout=self.wait)


async def _polled(poll_now: PollNow, server: str) -> None:
    await poll_now(server)
