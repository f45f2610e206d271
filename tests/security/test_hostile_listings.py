"""Listings a database or a JSON parser could refuse, sent byte for byte by a real stdio server.

What must hold on SQLite and on PostgreSQL alike: a listing that is I-JSON is stored exactly (a
`\\u0000` included) and its change is found; one that is not (NaN, Infinity, 1e400, a 400-digit
integer, a lone surrogate) is a recorded `malformed` poll that says where, counted towards
`server-unreachable`, and never a version; a database that still refuses what it was given leaves a
recorded failed poll, never only a log line; a configured secret the server echoes back is stored
and shown only as `[redacted]`.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session
from support import server_command, tool
from support.polls import poll_once

from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig
from monitor.store import PollOutcome, Store, polls
from monitor.store.models import FindingRecord, PollAttempt, Server, Snapshot, ToolDefinition
from monitor.store.polled import RecordedPoll

READ_ONLY = json.dumps({"tools": [tool("lookup", description="Look a record up.", read_only=True)]})


def revoked(description: str = '"Look a record up."', default: str = '"x"') -> str:
    """The listing text with `lookup` no longer read-only, and a description and a default as raw JSON."""
    return (
        '{"tools": [{"name": "lookup", "description": ' + description + ", "
        '"inputSchema": {"type": "object", "properties": {"q": {"type": "string", "default": '
        + default
        + '}}}, "annotations": {"readOnlyHint": false}}]}'
    )


REFUSED = {
    "nan": (revoked(default="NaN"), "not I-JSON: tools[0].inputSchema.properties.q.default: NaN"),
    "infinity": (
        revoked(default="-Infinity"),
        "not I-JSON: tools[0].inputSchema.properties.q.default: -Infinity",
    ),
    "beyond-double": (
        revoked(default="1e400"),
        "not I-JSON: tools[0].inputSchema.properties.q.default: Infinity",
    ),
    "huge-integer": (revoked(default="1" + "0" * 400), "an integer of 401 digits is beyond the double range"),
    # The SDK's JSON parser refuses a lone surrogate escape before the monitor sees the listing.
    "lone-surrogate": (revoked(description='"Look \\ud800 up."'), "not JSON-RPC"),
}


def poller_for(store: Store, listing: Path, name: str = "hostile", **server: Any) -> Poller:
    command, *args = server_command("hostile_server.py", "listing-file", "--listing", str(listing))
    config = Config(
        monitor=MonitorSettings(poll_timeout=20),
        servers=[ServerConfig(name=name, transport="stdio", command=command, args=args, **server)],
        source="test",
    )
    return Poller(store, config)


def poll(poller: Poller) -> PollOutcome:
    return poll_once(poller)


def test_a_nul_in_a_description_is_stored_exactly_and_the_change_found(store: Store, tmp_path: Path) -> None:
    listing = tmp_path / "tools.json"
    listing.write_text(READ_ONLY, encoding="utf-8")
    assert poll(poller_for(store, listing)).version == 1
    listing.write_text(revoked(description='"Look\\u0000 a record up."'), encoding="utf-8")
    outcome = poll(poller_for(store, listing))
    assert outcome.ok and outcome.version == 2, outcome.error
    assert "read-only-revoked" in {finding.rule for finding in outcome.findings}
    with store.sessions() as session:
        definitions = session.scalars(select(ToolDefinition.definition)).all()
        rules = session.scalars(select(FindingRecord.rule)).all()
    assert "Look\x00 a record up." in {d["description"] for d in definitions}
    assert "read-only-revoked" in rules


def test_a_nul_in_a_tool_name_is_stored_and_found_by_name(store: Store, tmp_path: Path) -> None:
    listing = tmp_path / "tools.json"
    listing.write_text(READ_ONLY, encoding="utf-8")
    poll(poller_for(store, listing))
    listing.write_text(json.dumps({"tools": [tool("look\x00up", read_only=False)]}), encoding="utf-8")
    outcome = poll(poller_for(store, listing))
    assert outcome.ok, outcome.error
    with store.sessions() as session:
        added = session.scalars(select(FindingRecord).where(FindingRecord.tool == "look\x00up")).all()
    # `look\x00up` reads as `lookup`, which it replaced: a look-alike rename as well as a new tool,
    # whose name a model reads with a control character in it.
    assert sorted(finding.rule for finding in added) == [
        "control-sequence",
        "tool-added",
        "tool-renamed-lookalike",
    ]
    assert {f.field for f in added if f.rule == "control-sequence"} == {"name"}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_listing_that_is_not_i_json_is_a_recorded_malformed_poll(
    store: Store, tmp_path: Path, case: str
) -> None:
    text, where = REFUSED[case]
    listing = tmp_path / "tools.json"
    listing.write_text(READ_ONLY, encoding="utf-8")
    poll(poller_for(store, listing))
    listing.write_text(text, encoding="utf-8")
    outcomes = [poll(poller_for(store, listing)) for _ in range(3)]
    assert [o.error_kind for o in outcomes] == ["malformed"] * 3
    assert where in (outcomes[0].error or "")
    assert [f.rule for f in outcomes[2].findings] == ["server-unreachable"]
    with store.sessions() as session:
        server = session.scalars(select(Server)).one()
        kinds = session.scalars(select(PollAttempt.error_kind).where(PollAttempt.ok.is_(False))).all()
        versions = session.scalars(select(Snapshot.version)).all()
    assert server.consecutive_failures == 3 and (server.last_error or "").startswith("malformed: ")
    assert kinds == ["malformed"] * 3
    assert versions == [1], "a listing that is not I-JSON never becomes a version"


class RefusingDatabase:
    """A poll hook that fails the poll's transaction the way a database refusing a value does."""

    def after_poll(self, session: Session, poll: RecordedPoll) -> None:
        if poll.ok:
            raise DataError("INSERT ...", {}, ValueError("unsupported Unicode escape sequence"))


def test_a_listing_the_database_refuses_is_still_a_recorded_failed_poll(store: Store, tmp_path: Path) -> None:
    listing = tmp_path / "tools.json"
    listing.write_text(READ_ONLY, encoding="utf-8")
    store.hooks.append(RefusingDatabase())
    outcome = poll(poller_for(store, listing))
    assert not outcome.ok and outcome.error_kind == "storage"
    assert "database refused the listing" in (outcome.error or "")
    assert "unsupported Unicode escape sequence" in (outcome.error or "")
    with store.sessions() as session:
        server = session.scalars(select(Server)).one()
        attempts = session.scalars(select(PollAttempt)).all()
    assert server.consecutive_failures == 1 and (server.last_error or "").startswith("storage: ")
    assert [(a.ok, a.error_kind) for a in attempts] == [(False, "storage")]


SECRET = "s3cr3t-token-reflected-9f2c"


def test_a_secret_the_server_echoes_is_stored_only_as_redacted(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = tmp_path / "tools.json"
    listing.write_text(
        json.dumps({"tools": [tool("lookup", description=f"Called with Bearer {SECRET}.", read_only=True)]}),
        encoding="utf-8",
    )
    monkeypatch.setenv("HOSTILE_TOKEN", SECRET)
    outcome = poll(poller_for(store, listing, env={"TOKEN": "${HOSTILE_TOKEN}"}))
    assert outcome.ok, outcome.error
    with store.sessions() as session:
        (definition,) = session.scalars(select(ToolDefinition.definition)).all()
    assert definition["description"] == "Called with Bearer [redacted]."
    assert SECRET not in json.dumps(definition)


def test_a_listing_torn_between_pages_is_read_again_from_the_first_page(store: Store) -> None:
    command, *args = server_command("hostile_server.py", "torn")
    config = Config(
        monitor=MonitorSettings(poll_timeout=20),
        servers=[ServerConfig(name="torn", transport="stdio", command=command, args=args)],
        source="test",
    )
    outcome = poll(Poller(store, config))
    assert outcome.ok, outcome.error
    with store.sessions() as session:
        names = sorted(session.scalars(select(ToolDefinition.name)))
    assert names == ["b", "c", "d"], (
        "the listing as it stands, not page 1 of one version and page 2 of the next"
    )


def test_a_large_diff_is_computed_off_the_writer_thread(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = polls.changes_against

    def watched(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(polls, "changes_against", watched)
    listing = tmp_path / "tools.json"

    def schema(kind: str) -> str:
        properties = {f"f{i:05d}": {"type": kind} for i in range(5_000)}
        return json.dumps(
            {"tools": [tool("bulk", input_schema={"type": "object", "properties": properties})]}
        )

    listing.write_text(schema("string"), encoding="utf-8")
    poll(poller_for(store, listing))
    listing.write_text(schema("integer"), encoding="utf-8")
    outcome = poll(poller_for(store, listing))
    rules = [f.rule for f in outcome.findings]
    assert rules == ["input-schema-changed", "changed-without-version-bump"], rules  # same serverInfo
    assert threads and not any(name.startswith("drift-monitor-store") for name in threads), threads
