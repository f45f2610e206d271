"""Fixtures for the security suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import child_processes


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """No test leaves a server or service process behind, nor a zombie."""
    before = set(child_processes())
    yield
    after = child_processes()
    assert [pid for pid, state in after.items() if state == "Z"] == []
    assert set(after) - before == set()
