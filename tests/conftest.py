"""Shared fixtures: a migrated database on SQLite, and on PostgreSQL when DRIFT_MONITOR_TEST_PG_URL is set;
`support.world`'s recorded history in it (`world`) and the API over that (`client`); the child-process
leak check. The tests folder goes on sys.path, so `from support import ...` works."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import no_leaked_children, postgres_schema
from support.world import World, populate

from monitor.store import Store, make_engine, migrate

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

# Hypothesis times every example (a 200 ms deadline) and the generation of its data (the too_slow
# health check): on a busy machine both fail a property test for being slow, which is not what it tests.
settings.register_profile("untimed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("untimed")

PG_URL = os.environ.get("DRIFT_MONITOR_TEST_PG_URL")
BACKENDS = [
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.skipif(not PG_URL, reason="no PostgreSQL")),
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `slow` first: `deploy/dev.py test` spreads the suite over several workers
    (pytest-xdist), and a long test handed out last would run alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a fresh SQLite file, or a fresh schema on the test PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'monitor.db'}"
        return
    assert PG_URL is not None
    with postgres_schema(PG_URL) as url:
        yield url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> Store:
    return Store(engine, attempts_kept=5, unreachable_after=3)


@pytest.fixture
def world(store: Store) -> World:
    """`support.world`'s recorded history (two servers, four versions of `search`, a failing server,
    alerts in every state) in `store`. A module that needs more in it defines its own `world`."""
    return populate(store)


@pytest.fixture
def client(world: World) -> Iterator[TestClient]:
    """The app over `world`, signed in with the API token (`support.web.web_client`), its lifespan
    running for the test. A module that needs another app or sign-in defines its own `client`."""
    # Imported here: only the tests that use the app import it, so the others still run while it cannot.
    from support.web import web_client

    with web_client(world.store) as test_client:
        yield test_client


@pytest.fixture
def no_leaked_processes() -> Iterator[None]:
    """The test leaves no child process behind (a server outliving its poll or its test), and no zombie.
    Suites that start processes use it: `pytestmark = pytest.mark.usefixtures("no_leaked_processes")`,
    or a conftest that overrides it as autouse."""
    with no_leaked_children():
        yield
