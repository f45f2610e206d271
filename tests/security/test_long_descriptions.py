"""A server that sends a long description must not buy minutes of the monitor's CPU.

The word diff grew much faster than its input (a 40 KB description cost about three minutes), and
pages and the session checker recomputed it. What must hold: the exact matcher is never handed more
than `WORD_DIFF_BUDGET` token pairs whatever the input, the result always rebuilds both texts, the
same change is not diffed twice, and a session holding an old listing is diffed once, not per check.
"""

from __future__ import annotations

import difflib
import random
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from support import record_poll, tool

from monitor.config import ServerConfig
from monitor.core import text
from monitor.core.findings import Severity
from monitor.notify.alerts import Alerting
from monitor.sessions import service as sessions
from monitor.store import Store
from monitor.store.registration import sync_servers

T0 = datetime(2026, 1, 1, 14, 0, tzinfo=UTC)


class CountingMatcher(difflib.SequenceMatcher[str]):
    """SequenceMatcher that records the size of every comparison it is asked to make."""

    sizes: ClassVar[list[tuple[int, int]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        CountingMatcher.sizes.append((len(self.a), len(self.b)))


@pytest.fixture
def matcher(monkeypatch: pytest.MonkeyPatch) -> type[CountingMatcher]:
    CountingMatcher.sizes = []
    monkeypatch.setattr(text.difflib, "SequenceMatcher", CountingMatcher)
    text._word_diff.cache_clear()
    return CountingMatcher


def scattered(size: int, seed: int, *, lines: bool = False) -> tuple[str, str]:
    """A description of about `size` characters from a tiny vocabulary (the matcher's worst case),
    and a copy with every seventh word changed."""
    rng = random.Random(seed)
    words = [rng.choice(["read", "the", "file", "a", "to"]) for _ in range(size // 4)]
    changed = ["WRITE" if index % 7 == 0 else word for index, word in enumerate(words)]
    joiner = "\n" if lines else " "
    return joiner.join(words), joiner.join(changed)


def rebuilds(old: str, new: str, ops: list[tuple[str, str]]) -> bool:
    return "".join(t for op, t in ops if op != "+") == old and "".join(t for op, t in ops if op != "-") == new


@pytest.mark.parametrize("size", [2_000, 16_000, 40_000, 200_000])
@pytest.mark.parametrize("lines", [False, True])
def test_word_diff_work_is_bounded_whatever_the_size(
    matcher: type[CountingMatcher], size: int, lines: bool
) -> None:
    old, new = scattered(size, size, lines=lines)
    ops = text.word_diff(old, new)
    assert rebuilds(old, new, ops)
    assert all(a * b <= text.WORD_DIFF_BUDGET for a, b in matcher.sizes), matcher.sizes


def test_an_edit_in_a_huge_description_is_still_shown_exactly(matcher: type[CountingMatcher]) -> None:
    old, _ = scattered(200_000, 1)
    new = old[:100_000] + " and then deletes everything " + old[100_000:]
    ops = text.word_diff(old, new)
    assert rebuilds(old, new, ops)
    assert [op for op, _ in ops] == ["=", "+", "="]
    assert "deletes everything" in ops[1][1]


def test_the_same_change_is_diffed_once(matcher: type[CountingMatcher]) -> None:
    old, new = scattered(2_000, 3)
    first = text.word_diff(old, new)
    calls = len(matcher.sizes)
    assert text.word_diff(old, new) == first
    assert len(matcher.sizes) == calls


def test_a_stale_session_is_diffed_once_not_at_every_check(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    diffs: list[int] = []
    real = sessions.diff_listings

    def counted(old: Any, new: Any) -> Any:
        diffs.append(1)
        return real(old, new)

    monkeypatch.setattr(sessions, "diff_listings", counted)
    monkeypatch.setattr(sessions, "_missed", OrderedDict())  # the pair may be cached by an earlier test
    server_id = sync_servers(
        store, [ServerConfig(name="git", transport="http", url="http://127.0.0.1:9/")], T0
    )["git"]
    long_text, edited = scattered(16_000, 5)
    record_poll(store, server_id, [tool("lookup", description=long_text, read_only=True)], T0)
    with store.sessions.begin() as session:
        sessions.register_session(
            session,
            server="git",
            session_id="s-1",
            client="gateway",
            connected_at=T0,
            fingerprint=None,
            tools=[tool("lookup", description=long_text, read_only=True)],
            now=T0,
        )
    record_poll(
        store, server_id, [tool("lookup", description=edited, read_only=False)], T0 + timedelta(minutes=1)
    )
    alerting = Alerting(base_url="http://127.0.0.1:8000", min_severity=Severity.LOW)
    for minute in range(10, 20):
        with store.sessions.begin() as session:
            sessions.check_sessions(
                session,
                now=T0 + timedelta(minutes=minute),
                grace=timedelta(minutes=5),
                max_age=timedelta(hours=8),
                expiry=timedelta(hours=1),
                policy=alerting,
            )
    assert len(diffs) == 1
