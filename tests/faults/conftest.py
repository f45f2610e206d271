"""The fault-injection suite: every test is checked for leaked child processes."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_leaked_processes(no_leaked_processes: None) -> None:
    """Every test leaves no new child process behind (a stdio server outliving its poll), and no zombie."""
