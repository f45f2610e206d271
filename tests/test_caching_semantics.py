"""2026-07-28 caching semantics (docs/contract.md section 5): `ttlMs`/`cacheScope` recorded with every poll
and used for `session-stale`, listings whose pages straddle a change fetched again, and a listen
acknowledgement that declines `toolsListChanged` raising `notifications-declined`.

Real servers over stdio (tests/servers/fastmcp_server.py), real databases.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from support import record_poll, tool
from support.servers import SERVERS

from monitor.collect.client import Limits, PollError, Target, fetch_listing, watch_list_changed
from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.core.findings import Severity
from monitor.notify.alerts import Alerting
from monitor.sessions.service import count_stale, list_sessions, register_session
from monitor.store import PollOutcome, Store
from monitor.store.models import Alert, FindingRecord, PollAttempt, Server, Snapshot
from monitor.store.polled import CacheHints
from monitor.store.registration import sync_servers

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

TOOLS = [tool(f"tool_{i}", read_only=True, description=f"Tool {i}.") for i in range(5)]
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def server_args(tmp_path: Path, *options: str) -> list[str]:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(TOOLS))
    return [str(SERVERS / "fastmcp_server.py"), str(tools_file), *options]


def stdio(tmp_path: Path, *options: str, era: Any = "modern") -> Target:
    return Target(
        name="notes", transport="stdio", command=sys.executable, args=server_args(tmp_path, *options), era=era
    )


def poll(store: Store, tmp_path: Path, *options: str) -> PollOutcome:
    server = ServerConfig(
        name="notes",
        transport="stdio",
        command=sys.executable,
        args=server_args(tmp_path, *options),
        era="modern",
    )
    config = Config(monitor=MonitorSettings(poll_timeout=20), servers=[server], source="test")
    poller = Poller(store, config)
    try:
        (outcome,) = asyncio.run(poller.poll(poller.jobs()))
    finally:
        poller.close()
    return outcome


def test_ttl_and_cache_scope_are_recorded_with_every_poll(store: Store, tmp_path: Path) -> None:
    outcome = poll(store, tmp_path, "--ttl-ms", "600000", "--page-size", "2")
    assert outcome.ok, outcome.error
    with store.sessions() as session:
        attempt = session.scalars(select(PollAttempt)).one()
        server = session.scalars(select(Server)).one()
        assert (attempt.ttl_ms, attempt.cache_scope, attempt.pages) == (600000, "public", 3)
        assert (server.ttl_ms, server.cache_scope) == (600000, "public")
        assert attempt.refetches == 0


async def test_pages_straddling_a_change_are_fetched_again_from_the_start(tmp_path: Path) -> None:
    """The first two first-page requests each see a different deploy: the first three passes each
    differ from the next (refetches 2), the fourth confirms the third, and what is returned is the
    settled listing, not a mix of two deploys."""
    listing = await fetch_listing(stdio(tmp_path, "--page-size", "2", "--straddle", "2"))
    assert listing.refetches == 2
    assert listing.tools == TOOLS


async def test_a_deploy_between_later_pages_is_never_returned_as_a_mix(tmp_path: Path) -> None:
    """A deploy right after page 2 is served changes pages 2 and 3 but not page 1: the first pass
    holds page 2 of the old listing and page 3 of the new one, a listing never served, which a
    re-check of the first page cannot see. Must hold: the new listing as served, confirmed by a
    second pass."""
    deployed = TOOLS[:2] + [{**tool, "description": "deploy 1"} for tool in TOOLS[2:]]
    options = ("--page-size", "2", "--deploy-after-page", "2", "--deploys", "1")
    listing = await fetch_listing(stdio(tmp_path, *options))
    assert listing.tools == deployed
    assert (listing.pages, listing.refetches) == (3, 1)


def test_a_listing_torn_on_every_pass_is_a_recorded_torn_listing_failure(
    store: Store, tmp_path: Path
) -> None:
    """Every pass sees a deploy between its pages 2 and 3, so no two passes agree. Must hold: a
    recorded `torn-listing` failure, and no version stored."""
    outcome = poll(store, tmp_path, "--page-size", "2", "--deploy-after-page", "2", "--deploys", "100")
    assert outcome.error_kind == "torn-listing", outcome
    assert "no two of 5 passes over its pages agreed" in (outcome.error or "")
    with store.sessions() as session:
        attempt = session.scalars(select(PollAttempt)).one()
        assert (attempt.ok, attempt.error_kind) == (False, "torn-listing")
        assert session.scalars(select(Snapshot)).all() == []


async def test_a_listing_that_never_settles_is_an_error_not_a_mix(tmp_path: Path) -> None:
    with pytest.raises(PollError) as caught:
        await fetch_listing(stdio(tmp_path, "--page-size", "2", "--straddle", "100"), Limits(timeout=20))
    assert caught.value.kind == "torn-listing" and "changed while it was paged" in caught.value.message


async def test_a_stale_cursor_restarts_the_listing_from_the_first_page_once(tmp_path: Path) -> None:
    """The server answers its own cursor with -32602 (its listing moved under it) once: the listing
    is read again from the first page, and the poll succeeds. Twice: a clear failure naming it."""
    listing = await fetch_listing(stdio(tmp_path, "--page-size", "2", "--stale-cursor", "1"))
    assert listing.tools == TOOLS
    with pytest.raises(PollError) as caught:
        await fetch_listing(stdio(tmp_path, "--page-size", "2", "--stale-cursor", "2"), Limits(timeout=20))
    assert caught.value.kind == "server-error"
    assert "refused its own cursor on page 2 again" in caught.value.message
    assert "cursor expired" in caught.value.message


def test_session_stale_waits_for_the_listing_ttl(store: Store) -> None:
    """A host may keep a listing for its ttlMs: with a TTL of an hour and a grace of five minutes,
    a session holding the old listing is not stale after ten minutes, and is after the hour."""
    (server_id,) = sync_servers(
        store, [ServerConfig(name="notes", transport="http", url="http://127.0.0.1:9/")], T0
    ).values()
    old, new = TOOLS[:1], [tool("tool_0", read_only=False)]
    record_poll(store, server_id, old, T0)
    with store.sessions.begin() as session:
        register_session(
            session,
            server="notes",
            session_id="s1",
            client="host/1",
            connected_at=T0,
            fingerprint=None,
            tools=old,
            now=T0,
        )
    changed_at = T0 + timedelta(minutes=1)
    record_poll(store, server_id, new, changed_at, cache=CacheHints(ttl_ms=3_600_000, cache_scope="private"))

    def stale(at: datetime) -> bool:
        """The sessions page's verdict, which the overview's stale-session tile must agree with."""
        with store.sessions() as session:
            (record,) = list_sessions(session, stale_only=False, now=at, grace=timedelta(minutes=5))
            assert count_stale(session, now=at, grace=timedelta(minutes=5)) == int(record.stale)
            return record.stale

    assert not stale(changed_at + timedelta(minutes=10)), "within the TTL a host lawfully keeps it"
    assert stale(changed_at + timedelta(minutes=61))


async def test_a_listen_ack_that_declines_tools_list_changed(store: Store, tmp_path: Path) -> None:
    """The server advertises tools.listChanged but acknowledges the listen stream without it. Must hold:
    the watch session reports the refusal, `notifications-declined` is raised once (not at every
    reconnect), and an acknowledgement that keeps it resolves the alert."""
    acks: list[bool] = []
    with pytest.raises(PollError) as caught:
        await watch_list_changed(
            stdio(tmp_path, "--list-changed", "decline"),
            Limits(timeout=20),
            on_ready=lambda: None,
            on_change=lambda: None,
            on_ack=acks.append,
        )
    assert acks == [False] and "honored none" in caught.value.message

    store.hooks.append(Alerting(base_url="http://127.0.0.1:8000", min_severity=Severity.MEDIUM))
    (server_id,) = sync_servers(
        store, [ServerConfig(name="notes", transport="http", url="http://127.0.0.1:9/")], T0
    ).values()
    record_poll(store, server_id, TOOLS, T0, list_changed_advertised=True)
    for minute in (1, 2):  # the watch reconnects and is declined again
        store.record_listen_ack(server_id, False, T0 + timedelta(minutes=minute))
    with store.sessions() as session:
        (finding,) = session.scalars(
            select(FindingRecord).where(FindingRecord.rule == "notifications-declined")
        ).all()
        assert finding.severity == "medium" and "declines toolsListChanged" in finding.message
        alert = session.scalars(select(Alert).where(Alert.rule == "notifications-declined")).one()
        assert alert.state == "open"
        assert session.get(Server, server_id).tools_list_changed_honored is False  # type: ignore[union-attr]
    store.record_listen_ack(server_id, True, T0 + timedelta(minutes=3))
    with store.sessions() as session:
        assert session.scalars(select(Alert.state)).one() == "resolved"
