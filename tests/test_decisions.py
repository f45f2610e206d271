"""Approvals and the decision point through the API, on SQLite and (when configured) PostgreSQL:
the review flow of the issue, tofu, off, stale listings, sessions, the kept decisions and /metrics."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select
from support import record_poll, tool
from support.web import TOKEN, TOKEN_ENV, web_client

from monitor.config import Config, ConfigError, MonitorSettings, ServerConfig, load_config
from monitor.core.findings import Severity
from monitor.core.fingerprint import fingerprint
from monitor.store import Store
from monitor.store.access import DecisionRecord
from monitor.store.models import Alert
from monitor.store.registration import sync_servers

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def demo_tools(lookup_read_only: bool = True) -> list[dict[str, Any]]:
    return [
        tool("lookup", description="Look a record up.", read_only=lookup_read_only, destructive=False),
        tool("search", description="Search records.", read_only=True),
        tool("purge", description="Delete records.", read_only=False, destructive=True),
    ]


@dataclass
class Demo:
    store: Store
    client: TestClient
    server_id: int
    clock: list[datetime]

    def poll(self, tools: list[dict[str, Any]]) -> None:
        self.clock[0] += timedelta(minutes=1)
        record_poll(self.store, self.server_id, tools, self.clock[0])

    def settle(self) -> None:
        """Wait until the decisions' traces (kept decisions, session beats) are written."""
        self.client.app.state.decision_point.recorder.flush()  # type: ignore[attr-defined]

    def decide(self, tool_name: str, **fields: Any) -> dict[str, Any]:
        response = self.client.post("/api/v1/decisions", json={"server": "demo", "tool": tool_name, **fields})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def make_demo(store: Store, approval: str) -> Iterator[Demo]:
    servers = [
        ServerConfig(
            name="demo",
            transport="http",
            url="http://127.0.0.1:9/mcp",
            approval=approval,
            aliases=["demo-host"],
        )
    ]
    config = Config(
        monitor=MonitorSettings(api_token_env=TOKEN_ENV, alert_min_severity=Severity.HIGH),
        servers=servers,
        source="test",
    )
    server_id = sync_servers(store, servers, T0)["demo"]
    clock = [T0]
    with web_client(store, config, clock=lambda: clock[0]) as client:
        yield Demo(store, client, server_id, clock)


@pytest.fixture
def review(store: Store) -> Iterator[Demo]:
    yield from make_demo(store, "review")


@pytest.fixture
def tofu(store: Store) -> Iterator[Demo]:
    yield from make_demo(store, "tofu")


def test_review_flow_ask_approve_deny_on_revoked_read_only_and_approve_again(review: Demo) -> None:
    never = review.decide("lookup")
    assert never["decision"] == "ask" and never["reasons"] == ["never-polled"]

    review.poll(demo_tools())
    first = review.decide("lookup")
    assert first["decision"] == "ask" and first["reasons"] == ["not-approved"]
    assert first["current_version"] == 1 and first["approved_version"] is None

    approved = review.client.post("/api/v1/servers/demo/approvals", json={"note": "reviewed the listing"})
    assert approved.status_code == 201, approved.text
    assert approved.json()["version"] == 1
    assert sorted(a["tool"] for a in approved.json()["approvals"]) == ["lookup", "purge", "search"]
    for name in ("lookup", "search", "purge"):
        answer = review.decide(name)
        assert answer["decision"] == "allow" and answer["reasons"] == ["approved"], answer

    review.poll(demo_tools(lookup_read_only=False))
    denied = review.decide("lookup")
    assert denied["decision"] == "deny"
    assert denied["rule"] == "read-only-revoked" and denied["severity"] == "critical"
    assert "read-only-revoked" in denied["reason"]
    assert denied["approved_version"] == 1 and denied["current_version"] == 2
    annotations = denied["annotations"]
    assert annotations["approved"]["readOnlyHint"] is True
    assert annotations["current"]["readOnlyHint"] is False
    assert annotations["enforced"]["readOnlyHint"] is False
    assert annotations["enforced"]["destructiveHint"] is False  # both said not destructive
    assert review.decide("search")["decision"] == "allow"
    assert review.decide("purge")["decision"] == "allow"

    again = review.client.post("/api/v1/servers/demo/approvals", json={"version": 2, "tools": ["lookup"]})
    assert again.status_code == 201, again.text
    allowed = review.decide("lookup")
    assert allowed["decision"] == "allow" and allowed["approved_version"] == 2


def test_enforced_annotations_are_the_stricter_per_field(review: Demo) -> None:
    review.poll(
        [
            tool(
                "t",
                read_only=False,
                destructive=False,
                annotations={"idempotentHint": True, "openWorldHint": False},
            )
        ]
    )
    assert review.client.post("/api/v1/servers/demo/approvals", json={}).status_code == 201
    review.poll(
        [
            tool(
                "t",
                read_only=False,
                destructive=True,
                annotations={"idempotentHint": False, "openWorldHint": True},
            )
        ]
    )
    body = review.client.get("/api/v1/servers/demo/annotations/enforced").json()
    assert body["current_version"] == 2
    entry = body["tools"]["t"]
    assert entry["decision"] == "deny"  # destructive-added and idempotent-revoked are high
    assert entry["enforced"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }


def test_tofu_trusts_the_first_version_and_asks_about_later_tools(tofu: Demo) -> None:
    tofu.poll(demo_tools())
    assert tofu.decide("lookup")["decision"] == "allow"
    tofu.poll([*demo_tools(), tool("export", description="Export records.", read_only=True)])
    added = tofu.decide("export")
    assert added["decision"] == "ask" and added["rule"] == "tool-added"
    history = tofu.client.get("/api/v1/servers/demo/approvals").json()
    assert {h["tool"] for h in history} == {"lookup", "search", "purge"}
    assert all(h["actor"] == "trust on first use" and h["version"] == 1 for h in history)

    revoked = tofu.client.delete("/api/v1/servers/demo/approvals/lookup", params={"note": "re-check"})
    assert revoked.status_code == 200 and revoked.json()["action"] == "revoke"
    after = tofu.decide("lookup")
    assert after["decision"] == "deny" and after["reasons"] == ["revoked"], "revoking never weakens"
    assert tofu.client.delete("/api/v1/servers/demo/approvals/lookup").status_code == 404
    lookup_history = tofu.client.get("/api/v1/servers/demo/approvals", params={"tool": "lookup"}).json()
    assert [(h["action"], h["actor"]) for h in lookup_history] == [
        ("revoke", "Administrator"),
        ("approve", "trust on first use"),
    ]
    assert lookup_history[0]["note"] == "re-check"


def test_unknown_removed_and_off(tofu: Demo, store: Store) -> None:
    tofu.poll(demo_tools())
    unknown = tofu.decide("nope")
    assert unknown["decision"] == "deny" and unknown["reasons"] == ["unknown-tool"]
    tofu.poll(demo_tools()[:2])
    removed = tofu.decide("purge")
    assert removed["decision"] == "deny" and removed["rule"] == "tool-removed"
    missing = tofu.client.post("/api/v1/decisions", json={"server": "ghost", "tool": "x"})
    assert missing.status_code == 404

    refused = tofu.client.put("/api/v1/servers/demo/approval", json={"mode": "off"})
    assert refused.status_code == 409, "a config server's mode is set in its config file"
    sync_servers(
        store, [ServerConfig(name="demo", transport="http", url="http://127.0.0.1:9/mcp", approval="off")], T0
    )
    off = tofu.decide("purge")
    assert off["decision"] == "allow" and off["reason"] == "approval off for this server"
    modes = [h for h in tofu.client.get("/api/v1/servers/demo/approvals").json() if h["action"] == "mode"]
    assert [(m["mode"], m["actor"]) for m in modes] == [("off", "config file")]


def test_api_server_mode_and_approval_errors(tofu: Demo) -> None:
    created = tofu.client.post(
        "/api/v1/servers", json={"name": "remote", "url": "http://127.0.0.1:9/mcp", "approval": "review"}
    )
    assert created.status_code == 201 and created.json()["approval"] == "review"
    changed = tofu.client.put(
        "/api/v1/servers/remote/approval", json={"mode": "tofu", "note": "trusted vendor"}
    )
    assert changed.status_code == 200 and changed.json()["approval"] == "tofu"
    nothing = tofu.client.post("/api/v1/servers/remote/approvals", json={})
    assert nothing.status_code == 409 and "not been polled" in nothing.json()["detail"]
    tofu.poll(demo_tools())
    no_tool = tofu.client.post("/api/v1/servers/demo/approvals", json={"tools": ["ghost"]})
    assert no_tool.status_code == 404 and "ghost" in no_tool.json()["detail"]
    no_version = tofu.client.post("/api/v1/servers/demo/approvals", json={"version": 9})
    assert no_version.status_code == 404
    unauthenticated = tofu.client.post(
        "/api/v1/servers/demo/approvals", json={}, headers={"Authorization": "Bearer wrong"}
    )
    assert unauthenticated.status_code == 401


def test_stale_listing_and_session_registration(tofu: Demo) -> None:
    tofu.poll(demo_tools())
    current = fingerprint(demo_tools())
    fresh = tofu.decide("lookup", fingerprint=current, session_id="gw-1", client="gateway")
    assert fresh["reasons"] == ["approved"] and fresh["fingerprint"] == current
    tofu.settle()
    sessions = tofu.client.get("/api/v1/sessions").json()["items"]
    assert [(s["session_id"], s["client"], s["fingerprint"]) for s in sessions] == [
        ("gw-1", "gateway", current)
    ]

    tofu.poll(demo_tools(lookup_read_only=False))
    stale = tofu.decide("search", fingerprint=current, session_id="gw-1", client="gateway")
    assert stale["decision"] == "allow" and stale["reasons"] == ["approved", "stale-listing"]
    assert "stale-listing" in stale["reason"]
    tofu.settle()
    (session,) = tofu.client.get("/api/v1/sessions").json()["items"]
    assert session["fingerprint"] == current and session["current_fingerprint"] != current


def _decisions_timed(metrics: str) -> float:
    """How many decisions the process-wide latency histogram has seen."""
    return sum(
        s.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "drift_monitor_decision_duration_seconds"
        for s in family.samples
        if s.name == "drift_monitor_decision_duration_seconds_count"
    )


def test_non_allow_decisions_are_kept_and_counted(tofu: Demo, store: Store) -> None:
    tofu.poll(demo_tools())
    tofu.poll(demo_tools(lookup_read_only=False))
    timed_before = _decisions_timed(tofu.client.get("/metrics").text)
    for _ in range(3):
        assert tofu.decide("lookup", session_id="s")["decision"] == "deny"
    assert tofu.decide("search")["decision"] == "allow"
    tofu.settle()
    with store.sessions() as session:
        kept = list(session.scalars(select(DecisionRecord)))
    assert [(k.tool, k.decision, k.rule) for k in kept] == [("lookup", "deny", "read-only-revoked")] * 3
    metrics = tofu.client.get("/metrics").text
    samples = {
        (s.labels["decision"], s.labels["reason"]): s.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "drift_monitor_decisions"
        for s in family.samples
        if s.name == "drift_monitor_decisions_total"
    }
    assert samples == {("deny", "changed-since-approval"): 3.0, ("allow", "approved"): 1.0}
    assert _decisions_timed(metrics) == timed_before + 4  # a cumulative latency histogram


def test_approving_resolves_the_alerts_the_change_opened(tofu: Demo, store: Store) -> None:
    tofu.poll(demo_tools())
    tofu.poll(demo_tools(lookup_read_only=False))
    with store.sessions.begin() as session:
        from monitor.notify.alerts import Alerting
        from monitor.store.models import FindingRecord, Server

        server = session.get_one(Server, tofu.server_id)
        findings = list(
            session.scalars(select(FindingRecord).where(FindingRecord.rule == "read-only-revoked"))
        )
        Alerting(base_url="http://127.0.0.1:8000").raise_findings(session, server, findings, now=T0)
    kept_open = tofu.client.post("/api/v1/servers/demo/approvals", json={"tools": ["search"]})
    assert kept_open.json()["resolved_alerts"] == []
    done = tofu.client.post("/api/v1/servers/demo/approvals", json={"tools": ["lookup"], "note": "intended"})
    assert len(done.json()["resolved_alerts"]) == 1
    with store.sessions() as session:
        (alert,) = session.scalars(select(Alert))
        assert alert.state == "resolved" and alert.tool == "lookup"


def porc(resource: str, operation: str = "mcp:tool:call") -> dict[str, Any]:
    """A PORC as ToolHive's HTTP PDP client builds it (pkg/authz/authorizers/http/porc.go), with
    operation metadata and arguments in the context (include_operation, include_args)."""
    feature, _, resource_id = resource.removeprefix("mrn:mcp:").partition(":")[2].partition(":")
    return {
        "principal": {"sub": "alice@example.com", "mroles": ["dev"], "mgroups": [], "mannotations": {}},
        "operation": operation,
        "resource": resource,
        "context": {
            "mcp": {"feature": feature, "operation": "call", "resource_id": resource_id, "args": {"q": "x"}}
        },
    }


def test_toolhive_pdp_answers_allow_from_the_decision(review: Demo) -> None:
    review.poll(demo_tools())
    url = "/api/v1/pdp/toolhive/decision"
    # ToolHive sends no headers of its own: the token travels as the password of the URL's userinfo.
    basic = {"Authorization": "Basic " + base64.b64encode(f"drift-monitor:{TOKEN}".encode()).decode()}
    plain = {"Authorization": ""}

    def allowed(resource: str, **kwargs: Any) -> bool:
        answer = review.client.post(url, json=porc(resource, **kwargs), headers=basic)
        assert answer.status_code == 200, answer.text
        assert set(answer.json()) == {"allow"}
        return bool(answer.json()["allow"])

    assert not allowed("mrn:mcp:demo-host:tool:lookup"), "review: ask is not an allow"
    assert review.client.post("/api/v1/servers/demo/approvals", json={}).status_code == 201
    assert allowed("mrn:mcp:demo-host:tool:lookup"), "the alias names the monitor's server"
    assert allowed("mrn:mcp:demo:tool:lookup")
    assert not allowed("mrn:mcp:demo:tool:missing")
    assert allowed("mrn:mcp:unknown:tool:lookup"), "a server the monitor does not know: no opinion"
    assert allowed("mrn:mcp:demo:prompt:greeting", operation="mcp:prompt:get"), "only tool calls"
    review.poll(demo_tools(lookup_read_only=False))
    assert not allowed("mrn:mcp:demo:tool:lookup")
    probe = review.client.post(
        url, params={"probe": "true"}, json=porc("mrn:mcp:demo:tool:search"), headers=basic
    )
    assert probe.json() == {"allow": True}
    bearer = review.client.post(url, json=porc("mrn:mcp:demo:tool:search"))
    assert bearer.json() == {"allow": True}
    wrong = review.client.post(
        url,
        json=porc("mrn:mcp:demo:tool:search"),
        headers={"Authorization": "Basic " + base64.b64encode(b"x:nope").decode()},
    )
    assert wrong.status_code == 200 and wrong.json() == {"allow": False}, "a 401 would be ToolHive's error"
    anonymous = review.client.post(url, json=porc("mrn:mcp:demo:tool:search"), headers=plain)
    assert anonymous.status_code == 200 and anonymous.json() == {"allow": False}
    other = review.client.post(
        url, json=porc("mrn:mcp:demo:tool:x", operation="mcp:prompt:get"), headers=plain
    )
    assert other.json() == {"allow": False}, "a caller that may not ask is allowed nothing"


def test_the_hook_endpoint_reads_a_pre_tool_use_input_through_the_alias(review: Demo) -> None:
    review.poll(demo_tools())
    hook = {
        "session_id": "s-9",
        "transcript_path": "~/.claude/projects/x/s-9.jsonl",
        "cwd": "~/x",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "mcp__demo-host__lookup",
        "tool_input": {},
        "tool_use_id": "toolu_1",
    }
    answer = review.client.post("/api/v1/hooks/claude-code", json=hook).json()
    assert answer["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert "not been approved" in answer["hookSpecificOutput"]["permissionDecisionReason"]
    post = review.client.post("/api/v1/hooks/claude-code", json={**hook, "hook_event_name": "PostToolUse"})
    assert post.json() == {}


@pytest.mark.parametrize(
    ("approved", "current", "enforced"),
    [
        ({"readOnlyHint": True}, {"readOnlyHint": False}, (False, True, False, True)),
        ({"readOnlyHint": True, "openWorldHint": False}, {"readOnlyHint": True}, (True, True, False, True)),
        (
            {"destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
            {"destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
            (False, False, True, False),
        ),
        ({"idempotentHint": True}, {}, (False, True, False, True)),
    ],
)
def test_enforced_is_read_only_and_idempotent_if_both_destructive_and_open_world_if_either(
    approved: dict[str, bool], current: dict[str, bool], enforced: tuple[bool, bool, bool, bool]
) -> None:
    from monitor.approvals.policy import enforced_hints, hints_of

    result = enforced_hints(
        hints_of(tool("t", annotations=approved)), hints_of(tool("t", annotations=current))
    )
    assert result is not None
    assert (
        result["readOnlyHint"],
        result["destructiveHint"],
        result["idempotentHint"],
        result["openWorldHint"],
    ) == enforced


def test_an_alias_may_not_name_another_server(tmp_path: Path) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text(
        '[[servers]]\nname = "a"\ntransport = "http"\nurl = "http://127.0.0.1:9/"\naliases = ["b"]\n'
        '[[servers]]\nname = "b"\ntransport = "http"\nurl = "http://127.0.0.1:9/"\n'
    )
    with pytest.raises(ConfigError, match="alias 'b' is already the name or alias of a server"):
        load_config(config)


def test_another_instance_sees_an_approval_at_its_next_decision(store: Store, database_url: str) -> None:
    """Two processes on one database: each has its own view; an approval committed through the other
    engine moves the generation, so the very next decision here reflects it (no polling, no TTL)."""
    from monitor.approvals.cache import DecisionView
    from monitor.approvals.storage import record_approvals
    from monitor.store import make_engine
    from monitor.store.models import Server

    servers = [ServerConfig(name="demo", transport="http", url="http://127.0.0.1:9/", approval="review")]
    server_id = sync_servers(store, servers, T0)["demo"]
    record_poll(store, server_id, demo_tools(), T0)
    here = DecisionView(store.engine)
    assert here.server("demo").view.verdict("lookup").decision == "ask"  # type: ignore[union-attr]
    other = make_engine(database_url)
    try:
        with Store(other).sessions.begin() as session:
            record_approvals(
                session,
                session.get_one(Server, server_id),
                version=None,
                tools=["lookup"],
                note="",
                actor="elsewhere",
                now=T0,
            )
    finally:
        other.dispose()
    assert here.server("demo").view.verdict("lookup").decision == "allow"  # type: ignore[union-attr]


def test_kept_decisions_are_trimmed_to_the_newest_and_pruned_by_age(store: Store) -> None:
    from sqlalchemy import func

    from monitor.approvals.policy import Verdict
    from monitor.approvals.storage import KeptDecision, prune_decisions, record_decisions
    from monitor.core.states import DecisionKind

    server_id = sync_servers(
        store, [ServerConfig(name="d", transport="http", url="http://127.0.0.1:9/")], T0
    )["d"]
    verdict = Verdict(DecisionKind.DENY, "unknown-tool", "not listed")
    with store.sessions.begin() as session:
        for batch in range(0, 100, 30):  # batches as the recorder writes them, the last one short
            kept = [
                KeptDecision(server_id, f"t{n}", verdict, None, None, T0 + timedelta(minutes=n))
                for n in range(batch, min(100, batch + 30))
            ]
            record_decisions(session, kept, keep=10)
    with store.sessions() as session:
        kept = list(session.scalars(select(DecisionRecord.tool).order_by(DecisionRecord.id)))
    assert kept == [f"t{n}" for n in range(90, 100)]
    cutoff = T0 + timedelta(minutes=95)
    assert prune_decisions(store.engine, older_than=cutoff, dry_run=True) == 5
    assert prune_decisions(store.engine, older_than=cutoff, batch_size=2) == 5
    with store.sessions() as session:
        assert session.scalar(select(func.count()).select_from(DecisionRecord)) == 5


def test_the_recorder_keeps_the_good_writes_of_a_batch_with_a_bad_one(store: Store) -> None:
    from monitor.approvals.policy import Verdict
    from monitor.approvals.recorder import DecisionRecorder, DecisionWrite
    from monitor.core.states import DecisionKind

    server_id = sync_servers(
        store, [ServerConfig(name="d", transport="http", url="http://127.0.0.1:9/")], T0
    )["d"]
    verdict = Verdict(DecisionKind.ASK, "not-approved", "not approved yet")
    recorder = DecisionRecorder(store, keep=100)
    try:
        for target in (server_id + 1000, server_id):  # the first names a server that is gone
            recorder.submit(DecisionWrite(target, "d", "t", verdict, None, None, None, T0))
        recorder.flush()
    finally:
        recorder.close()
    with store.sessions() as session:
        assert [row.server_id for row in session.scalars(select(DecisionRecord))] == [server_id]
