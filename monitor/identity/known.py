"""Named tokens kept in memory, so identifying a caller by its token reads one counter, not the table.

Every hook call and decision carries a token, and looking it up was a statement through the ORM per
request. Here each process keeps the tokens it has seen (by the SHA-256 of the secret, as the table
holds them, and the secrets that are no token, so a flood of wrong ones is no flood of reads) while
`decision_names.tokens_generation` stays where it was: the transaction that creates or revokes a token
moves it (`monitor.store.generations.tokens_changed`), so a revocation on any instance is followed at
the next request, in commit order. Expiry is a time and is checked at every request. When a token was
last used is recorded at most every `USE_RECORDED_EVERY`, off the request path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from monitor.core.roles import Caller, Via
from monitor.identity.storage import USE_RECORDED_EVERY, TokenState, secret_hash, token_state
from monitor.store.statereads import StateReads

MAX_KEPT = 10_000
"""Secrets kept at most: past that the map starts again (random wrong secrets cannot grow memory)."""


class KnownTokens:
    """The named tokens of one process, as of the tokens' generation (thread-safe)."""

    def __init__(
        self, sessions: sessionmaker[Session], reads: StateReads, used: Callable[[str, datetime], None]
    ) -> None:
        self.sessions = sessions
        self.reads = reads
        self.used = used
        """Records that a token was used at a time (off the request path)."""
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._known: dict[str, TokenState | None] = {}
        self._used: dict[str, datetime] = {}

    def caller(self, secret: str, now: datetime, source: str) -> Caller | None:
        """The caller a named token's secret is, while it is neither revoked nor expired."""
        hashed = secret_hash(secret)
        generation = self.reads.generations().tokens
        with self._lock:
            if generation != self._generation:
                self._known, self._generation = {}, generation
            known = self._known.get(hashed, _UNSEEN)
        if known is _UNSEEN:
            with self.sessions() as session:
                known = token_state(session, hashed)
            with self._lock:
                if self._generation == generation:  # read at least as late as the counter said
                    if len(self._known) >= MAX_KEPT:
                        self._known = {}
                    self._known[hashed] = known
        if not isinstance(known, TokenState) or not known.valid(now):
            return None
        self._note_use(known, now)
        return Caller(known.name, known.role, Via.TOKEN, source)

    def _note_use(self, token: TokenState, now: datetime) -> None:
        with self._lock:
            last = self._used.get(token.name, token.last_used_at)
            due = last is None or now - last >= USE_RECORDED_EVERY
            if due:
                self._used[token.name] = now
        if due:
            self.used(token.name, now)


_UNSEEN = object()
