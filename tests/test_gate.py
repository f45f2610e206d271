"""The decision point fails closed (docs/contract.md section 10), tried as an attacker and a careless
operator would: for every path to an answer, what does the host get when something fails?

- a listing the monitor refuses (duplicate names, not I-JSON, a lone surrogate) denies every tool of
  its server until a valid one arrives, on the API, Claude Code's hook and ToolHive's PDP;
- a transport failure keeps the last good listing, until it is older than `decision_max_age`;
- revoking an approval denies; the Claude Code hook gives no opinion (not `allow`) about approved
  tools and servers whose decisions are off, unless `hook_allow_approved` opts in;
- names: longest match with Claude Code's normalisation, aliases over the API, unmonitored servers
  answered as configured and counted and listed;
- hook inputs: deep, large or unreadable inputs are a 200 deny, never a status the host ignores.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from support import record_poll, server_command, tool
from support.gate import (
    READ_ONLY_LOOKUP,
    T0,
    WRITING_LOOKUP,
    Gate,
    gate_for,
    http_server,
    permission,
    pre_tool_use,
)
from support.polls import poll_once

from monitor.collect.poller import Poller
from monitor.config import Config, DecisionSettings, MonitorSettings, ServerConfig
from monitor.core.findings import Severity
from monitor.notify.alerts import alerting_store
from monitor.store import PollOutcome, Store
from monitor.store.access import UnmonitoredServer
from monitor.store.models import Alert, FindingRecord
from monitor.store.registration import sync_servers


@pytest.fixture
def gate(store: Store) -> Iterator[Gate]:
    yield from gate_for(store, [http_server("demo")])


# --- refused listings ------------------------------------------------------------------------------

LOOKUP_RAW = '"description": "Look a record up.", "inputSchema": {"type": "object"}'
REFUSED = {
    # The same tool twice, the destructive copy second: a host that maps tools by name keeps it.
    "duplicate-name": json.dumps({"tools": [READ_ONLY_LOOKUP, WRITING_LOOKUP]}),
    "not-i-json": '{"tools": [{"name": "lookup", ' + LOOKUP_RAW + ', "annotations": {"x": NaN}}]}',
    "lone-surrogate": '{"tools": [{"name": "lookup", "description": "Look \\ud800 up.", '
    '"inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": false}}]}',
}


def stdio_server(listing: Path) -> ServerConfig:
    command, *args = server_command("hostile_server.py", "listing-file", "--listing", str(listing))
    return ServerConfig(name="demo", transport="stdio", command=command, args=args)


def poll_as_serve(store: Store, server: ServerConfig) -> PollOutcome:
    """One poll as `serve` records it: through the store with the alert policy's hook."""
    config = Config(monitor=MonitorSettings(poll_timeout=20), servers=[server], source="test")
    alerting, _ = alerting_store(store.engine, config)
    return poll_once(Poller(alerting, config))


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refused_listing_denies_every_tool_until_a_valid_one_arrives(
    store: Store, tmp_path: Path, case: str
) -> None:
    listing = tmp_path / "tools.json"
    server = stdio_server(listing)
    for gate in gate_for(store, [server]):
        listing.write_text(json.dumps({"tools": [READ_ONLY_LOOKUP]}), encoding="utf-8")
        assert poll_as_serve(store, server).version == 1
        assert gate.decide("demo", "lookup")["decision"] == "allow", "tofu trusts the first version"
        assert gate.toolhive("demo", "lookup") is True

        listing.write_text(REFUSED[case], encoding="utf-8")
        for _ in range(2):  # every poll of it is refused, the first and the next
            refused = poll_as_serve(store, server)
            assert not refused.ok and refused.error_kind == "malformed", refused
            answer = gate.decide("demo", "lookup")
            assert answer["decision"] == "deny" and answer["reasons"] == ["listing-unverifiable"], answer
            assert permission(gate.hook("mcp__demo__lookup")) == "deny"
            assert gate.toolhive("demo", "lookup") is False
            assert gate.decide("demo", "anything")["decision"] == "deny"

        listing.write_text(json.dumps({"tools": [READ_ONLY_LOOKUP]}), encoding="utf-8")
        assert poll_as_serve(store, server).ok
        assert gate.decide("demo", "lookup")["decision"] == "allow", "verified again"


def test_duplicate_names_are_a_high_finding_with_the_stricter_reading(store: Store, tmp_path: Path) -> None:
    listing = tmp_path / "tools.json"
    server = stdio_server(listing)
    for _gate in gate_for(store, [server]):
        listing.write_text(json.dumps({"tools": [READ_ONLY_LOOKUP]}), encoding="utf-8")
        poll_as_serve(store, server)
        listing.write_text(REFUSED["duplicate-name"], encoding="utf-8")
        first, again = poll_as_serve(store, server), poll_as_serve(store, server)
        assert [f.rule for f in first.findings] == ["duplicate-tool-name"]
        assert again.findings == [], "the same refusal is one finding, not one a poll"
        (finding,) = first.findings
        assert finding.severity == Severity.HIGH and "lookup" in finding.message
        assert finding.detail["strictest"]["readOnlyHint"] is False
        assert finding.detail["strictest"]["destructiveHint"] is True
        with store.sessions() as session:
            alert = session.scalars(select(Alert).where(Alert.rule == "duplicate-tool-name")).one()
            assert alert.state == "open"
        listing.write_text(json.dumps({"tools": [READ_ONLY_LOOKUP]}), encoding="utf-8")
        assert poll_as_serve(store, server).ok
        with store.sessions() as session:
            assert session.get_one(Alert, alert.id).state == "resolved", "a storable listing ends it"


# --- freshness -------------------------------------------------------------------------------------


def test_a_transport_failure_keeps_the_last_good_listing_until_it_is_stale(gate: Gate) -> None:
    gate.poll("demo", [READ_ONLY_LOOKUP])
    failed_at = gate.clock[0] + timedelta(seconds=30)
    gate.store.record_failure(
        gate.ids["demo"], "connect", "connection refused", started_at=failed_at, finished_at=failed_at
    )
    assert gate.decide("demo", "lookup")["decision"] == "allow", "unreachable is not refused"
    gate.clock[0] = T0 + timedelta(seconds=179)
    assert gate.decide("demo", "lookup")["decision"] == "allow", "three 60 s intervals"
    gate.clock[0] = T0 + timedelta(seconds=181)
    stale = gate.decide("demo", "lookup")
    assert stale["decision"] == "ask" and stale["reasons"] == ["listing-stale"], stale
    assert permission(gate.hook("mcp__demo__lookup")) == "ask"
    assert gate.toolhive("demo", "lookup") is False


def test_stale_decision_deny_and_a_servers_own_max_age(store: Store) -> None:
    servers = [http_server("demo"), http_server("slow", decision_max_age=3600)]
    for gate in gate_for(store, servers, DecisionSettings(stale_decision="deny")):
        gate.poll("demo", [READ_ONLY_LOOKUP])
        gate.poll("slow", [READ_ONLY_LOOKUP])
        gate.clock[0] = T0 + timedelta(minutes=30)
        assert gate.decide("demo", "lookup")["decision"] == "deny"
        assert gate.decide("slow", "lookup")["decision"] == "allow", "its own decision_max_age: 1 h"


def test_refresh_on_decision_polls_a_server_last_polled_long_ago_once_per_interval(store: Store) -> None:
    polled: list[str] = []
    gates: list[Gate] = []

    async def poll_now(name: str) -> PollOutcome | None:
        polled.append(name)
        if len(polled) > 1:  # the server does not answer this time: nothing is recorded
            return None
        gate = gates[0]
        return record_poll(gate.store, gate.ids[name], [WRITING_LOOKUP], gate.clock[0])

    settings = DecisionSettings(refresh_on_decision=60)
    for gate in gate_for(store, [http_server("demo")], settings, poll_now=poll_now):
        gates.append(gate)
        gate.poll("demo", [READ_ONLY_LOOKUP])
        gate.clock[0] = T0 + timedelta(seconds=30)
        assert gate.decide("demo", "lookup")["decision"] == "allow" and polled == [], "polled lately"
        gate.clock[0] = T0 + timedelta(minutes=10)
        first = gate.decide("demo", "lookup")
        assert polled == ["demo"], "a decision about a server last polled 10 min ago polls it first"
        assert first["decision"] == "deny" and first["rule"] == "read-only-revoked", "answered from it"
        gate.clock[0] = T0 + timedelta(minutes=20)
        for _ in range(3):
            assert gate.decide("demo", "lookup")["decision"] == "deny"
        assert polled == ["demo", "demo"], "at most once per interval, however often it is asked"


def test_a_stricter_answer_is_never_weakened_by_staleness(gate: Gate) -> None:
    gate.poll("demo", [READ_ONLY_LOOKUP])
    gate.clock[0] += timedelta(minutes=1)
    gate.poll("demo", [WRITING_LOOKUP])
    gate.clock[0] += timedelta(hours=1)
    answer = gate.decide("demo", "lookup")
    assert answer["decision"] == "deny" and answer["rule"] == "read-only-revoked"


# --- what hosts are told ---------------------------------------------------------------------------


def test_the_claude_code_hook_never_widens_what_claude_code_allows(store: Store) -> None:
    servers = [http_server("demo"), http_server("ungated", approval="off")]
    for gate in gate_for(store, servers):
        gate.poll("demo", [READ_ONLY_LOOKUP])
        gate.poll("ungated", [WRITING_LOOKUP])
        assert gate.decide("demo", "lookup")["decision"] == "allow"
        assert gate.hook("mcp__demo__lookup") == {}, "approved: Claude Code asks as without the hook"
        assert gate.hook("mcp__ungated__lookup") == {}, "approval off: no opinion"
        assert gate.toolhive("demo", "lookup") is True, "ToolHive has no prompt of its own"
    for gate in gate_for(store, servers, DecisionSettings(hook_allow_approved=True)):
        assert permission(gate.hook("mcp__demo__lookup")) == "allow", "opted in"
        assert gate.hook("mcp__ungated__lookup") == {}


def test_revoking_a_revoked_read_only_tools_approval_denies(gate: Gate) -> None:
    gate.poll("demo", [READ_ONLY_LOOKUP])
    gate.clock[0] += timedelta(minutes=1)
    gate.poll("demo", [WRITING_LOOKUP])
    assert gate.decide("demo", "lookup")["decision"] == "deny"
    approved = gate.client.post("/api/v1/servers/demo/approvals", json={"tools": ["lookup"]})
    assert approved.status_code == 201, approved.text
    assert gate.decide("demo", "lookup")["decision"] == "allow"
    assert gate.client.delete("/api/v1/servers/demo/approvals/lookup").status_code == 200
    answer = gate.decide("demo", "lookup")
    assert answer["decision"] == "deny" and answer["reasons"] == ["revoked"], "never weaker than before"
    assert permission(gate.hook("mcp__demo__lookup")) == "deny"


# --- names ---------------------------------------------------------------------------------------


def test_names_are_matched_the_hosts_way_longest_first(store: Store) -> None:
    servers = [http_server("a"), http_server("a__b"), http_server("srv_"), http_server("io.acme.search")]
    for gate in gate_for(store, servers):
        gate.poll("a", [tool("b__lookup", read_only=True)])
        gate.poll("a__b", [WRITING_LOOKUP])
        gate.poll("srv_", [WRITING_LOOKUP])
        gate.poll("io.acme.search", [WRITING_LOOKUP])
        for name in ("a__b", "srv_", "io.acme.search"):
            gate.clock[0] += timedelta(seconds=1)
            gate.poll(name, [READ_ONLY_LOOKUP])
        # Each server's lookup now claims read-only (read-only-claimed, high): denied since approval.
        assert permission(gate.hook("mcp__a__b__lookup")) == "deny", "server a__b, not a's b__lookup"
        assert permission(gate.hook("mcp__srv___lookup")) == "deny"
        assert permission(gate.hook("mcp__io_acme_search__lookup")) == "deny", "Claude Code's normalisation"
        assert gate.hook("mcp__a__b__nothing") != {}, "a__b's unknown tool is denied, not another server's"


def test_aliases_set_over_the_api_name_a_server(gate: Gate) -> None:
    gate.poll("demo", [WRITING_LOOKUP])
    gate.clock[0] += timedelta(seconds=1)
    gate.poll("demo", [READ_ONLY_LOOKUP])
    assert gate.hook("mcp__prod-demo__lookup") == {}, "not yet an alias: unmonitored"
    response = gate.client.put("/api/v1/servers/demo/aliases", json={"aliases": ["prod-demo"]})
    assert response.status_code == 200 and response.json()["aliases"] == ["prod-demo"], response.text
    assert permission(gate.hook("mcp__prod-demo__lookup")) == "deny", "the very next decision"
    assert gate.client.put("/api/v1/servers/demo/aliases", json={"aliases": ["demo"]}).status_code == 200
    taken = gate.client.post(
        "/api/v1/servers", json={"name": "other", "url": "http://127.0.0.1:9/mcp", "aliases": ["prod-demo"]}
    )
    assert taken.status_code == 201, "prod-demo is no longer demo's"


def test_unmonitored_servers_are_answered_as_configured_counted_and_listed(store: Store) -> None:
    for gate in gate_for(store, [http_server("demo")]):
        assert gate.hook("mcp__nobody__lookup") == {}, "unmonitored = none: the host decides"
        assert gate.toolhive("nobody", "lookup") is True
        gate.client.app.state.decision_point.recorder.flush()  # type: ignore[attr-defined]
        metrics = gate.client.get("/metrics").text
        counted = {
            sample.labels["host"]: sample.value
            for family in text_string_to_metric_families(metrics)
            for sample in family.samples
            if sample.name == "drift_monitor_unmonitored_calls_total"
        }
        assert counted == {"claude-code": 1.0, "toolhive": 1.0}
        with store.sessions() as session:
            seen = {(row.name, row.host, row.calls) for row in session.scalars(select(UnmonitoredServer))}
        assert seen == {("nobody", "claude-code", 1), ("nobody", "toolhive", 1)}
        assert "nobody" in gate.client.get("/sessions").text
    for gate in gate_for(store, [http_server("demo")], DecisionSettings(unmonitored="deny")):
        assert permission(gate.hook("mcp__nobody__lookup")) == "deny"
        assert gate.toolhive("nobody", "lookup") is False
    for gate in gate_for(store, [http_server("demo")], DecisionSettings(unmonitored="ask")):
        assert permission(gate.hook("mcp__nobody__lookup")) == "ask"


# --- hook inputs -----------------------------------------------------------------------------------


def test_any_hook_input_is_answered_200_and_the_decision_never_reads_tool_input(store: Store) -> None:
    for gate in gate_for(store, [http_server("demo")], max_request_bytes=1 << 20):
        gate.poll("demo", [WRITING_LOOKUP])
        gate.clock[0] += timedelta(seconds=1)
        gate.poll("demo", [READ_ONLY_LOOKUP])  # lookup claims read-only since tofu: deny
        url = "/api/v1/hooks/claude-code"
        deep = json.dumps(pre_tool_use("mcp__demo__lookup", tool_input=None))
        deep = deep.replace('"tool_input": null', '"tool_input": ' + "[" * 1000 + "]" * 1000)
        large = pre_tool_use("mcp__demo__lookup", tool_input={"content": "x" * 900_000})
        for body in (
            deep.encode(),
            json.dumps(large).encode(),
            json.dumps(pre_tool_use("mcp__demo__lookup")).encode(),
        ):
            answer = gate.client.post(url, content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 200 and permission(answer.json()) == "deny", answer.text
            assert "read-only-claimed" in answer.text, "the decision itself, not a refusal of the input"
        over = json.dumps(pre_tool_use("mcp__demo__lookup", tool_input={"content": "x" * (1 << 20)}))
        refused = {
            "over the limit": over.encode(),
            "not JSON": b'{"tool_name": "mcp__demo__lookup",',
            "not an object": b"[]",
            "not UTF-8": b'{"tool_name": "\xff"}',
            "no tool_name": json.dumps({"hook_event_name": "PreToolUse"}).encode(),
        }
        for why, body in refused.items():
            answer = gate.client.post(url, content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 200, (why, answer.status_code)
            assert permission(answer.json()) == "deny", (why, answer.text)
        toolhive = gate.client.post("/api/v1/pdp/toolhive/decision", content=b"{oops")
        assert toolhive.status_code == 200 and toolhive.json() == {"allow": False}
        unauthenticated = gate.client.post(
            url, json=pre_tool_use("mcp__demo__lookup"), headers={"Authorization": ""}
        )
        assert unauthenticated.status_code == 200, "a 401 would let the host run the call"
        assert permission(unauthenticated.json()) == "deny", "the token is still required: without it, a deny"


def test_a_refused_poll_keeps_its_findings_and_the_server_state_says_why(gate: Gate) -> None:
    gate.poll("demo", [READ_ONLY_LOOKUP])
    at = gate.clock[0] + timedelta(seconds=5)
    gate.store.record_failure(
        gate.ids["demo"], "limit", "listing over 16777216 bytes", started_at=at, finished_at=at
    )
    server = gate.client.get("/api/v1/servers/demo").json()
    assert server["unverifiable_reason"] == "limit: listing over 16777216 bytes"
    assert gate.decide("demo", "lookup")["reasons"] == ["listing-unverifiable"]
    with gate.store.sessions() as session:
        assert session.scalars(select(FindingRecord.rule)).all() == []


# --- commit order ----------------------------------------------------------------------------------


class HoldBeforeCommit:
    """A poll hook that holds the poll's transaction open (its rows written, ids taken) until released."""

    def __init__(self) -> None:
        self.written = threading.Event()
        self.release = threading.Event()

    def after_poll(self, session: Any, poll: Any) -> None:
        self.written.set()
        assert self.release.wait(60), "never released"


def test_decisions_follow_commit_order_not_id_order(database_url: str, engine: Any) -> None:
    """The revocation of server x takes its snapshot id first and commits last, after a larger id of
    server y committed: the next decision about x must see it (PostgreSQL hands out ids at insert)."""
    if database_url.startswith("sqlite"):
        pytest.skip("SQLite has one writer at a time: transactions cannot commit out of id order there")
    from monitor.approvals.cache import DecisionView

    servers = [http_server("x"), http_server("y")]
    plain = Store(engine)
    ids = sync_servers(plain, servers, T0)
    record_poll(plain, ids["x"], [READ_ONLY_LOOKUP], T0)
    record_poll(plain, ids["y"], [READ_ONLY_LOOKUP], T0)
    view = DecisionView(engine)
    assert view.server("x").view.verdict("lookup").decision == "allow"  # type: ignore[union-attr]

    hold = HoldBeforeCommit()
    held = Store(engine, hooks=[hold])
    failed: list[BaseException] = []

    def revoke() -> None:
        try:
            record_poll(held, ids["x"], [WRITING_LOOKUP], T0 + timedelta(minutes=1))
        except BaseException as exc:
            failed.append(exc)
            hold.written.set()

    revocation = threading.Thread(target=revoke)
    revocation.start()
    try:
        assert hold.written.wait(60) and not failed, f"the revocation's transaction never wrote: {failed}"
        search = tool("search", description="Search records.", read_only=True)
        later = record_poll(plain, ids["y"], [READ_ONLY_LOOKUP, search], T0 + timedelta(minutes=1))
        assert later.new_version, "y's new version (a larger snapshot id) committed first"
        assert view.server("x").view.verdict("lookup").decision == "allow"  # type: ignore[union-attr]
    finally:
        hold.release.set()
        revocation.join(60)
    assert not revocation.is_alive() and not failed, failed
    with engine.connect() as connection:
        from sqlalchemy import text

        ids_in_order = connection.execute(text("SELECT server_id FROM snapshots ORDER BY id")).scalars().all()
    assert ids_in_order[-2:] == [ids["x"], ids["y"]], "x's version took the smaller id"
    decided = view.server("x").view.verdict("lookup")  # type: ignore[union-attr]
    assert decided.decision == "deny" and decided.rule == "read-only-revoked", "seen at the next decision"
