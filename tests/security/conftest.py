"""The security suite: every test is checked for leaked child processes."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_leaked_processes(no_leaked_processes: None) -> None:
    """No test leaves a server or service process behind, nor a zombie."""
