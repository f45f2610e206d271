"""The decision lane (monitor/approvals/lane.py, docs/approvals.md "Under load"): a decision request that
gets no slot in time is answered at once, fail-closed in its host's terms (never an allow, never an
error status a host would take as "run the tool"), and the lane hands its slots out in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.gate import READ_ONLY_LOOKUP, Gate, gate_for, http_server, permission, porc, pre_tool_use
from test_host_hooks import codex_input, gemini_input

from monitor.approvals.lane import DecisionLane
from monitor.config import DecisionSettings
from monitor.store import Store
from monitor.web.middleware import CONTENT_SECURITY_POLICY


def lane_gate(store: Store, **settings: Any) -> Iterator[Gate]:
    """Server `demo`, its first listing trusted (every tool allowed), behind a lane set by `settings`."""
    for gate in gate_for(store, [http_server("demo")], decisions=DecisionSettings(**settings)):
        gate.poll("demo", [READ_ONLY_LOOKUP])
        yield gate


@pytest.fixture
def gate(store: Store) -> Iterator[Gate]:
    yield from lane_gate(store, max_wait=4)  # the longest: a decided answer is never late here


def full(gate: Gate) -> DecisionLane:
    """The lane with every slot taken, as by decisions in progress, and a short `max_wait`; no pace
    measured (the decisions before set one), so every request waits its `max_wait`."""
    lane: DecisionLane = gate.client.app.state.decision_lane  # type: ignore[attr-defined]
    lane.free = 0
    lane.max_wait = 0.01
    lane.hold = None
    return lane


def unanswered(gate: Gate) -> dict[str, float]:
    text = gate.client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "drift_monitor_decisions_unanswered":
            return {sample.labels["why"]: sample.value for sample in family.samples}
    raise AssertionError("no drift_monitor_decisions_unanswered in /metrics")


def post(gate: Gate, path: str, body: Any) -> dict[str, Any]:
    response = gate.client.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_call_without_a_slot_in_time_gets_its_hosts_fail_closed_answer(gate: Gate) -> None:
    assert permission(gate.hook("mcp__demo__lookup")) is None  # decided: an allowed tool, no opinion
    assert gate.toolhive("demo", "lookup") is True
    lane = full(gate)

    assert permission(gate.hook("mcp__demo__lookup")) == "ask"  # [decisions] stale_decision
    reason = gate.hook("mcp__demo__lookup")["hookSpecificOutput"]["permissionDecisionReason"]
    assert "too many decisions at once" in reason
    codex = post(gate, "/api/v1/hooks/codex", codex_input("mcp__demo__lookup"))
    assert codex["hookSpecificOutput"]["permissionDecision"] == "deny"  # Codex runs an ask
    gemini = post(gate, "/api/v1/hooks/gemini-cli", gemini_input("mcp_demo_lookup", "demo", "lookup"))
    assert gemini["decision"] == "ask"
    assert post(gate, "/api/v1/pdp/toolhive/decision", porc("demo", "lookup")) == {"allow": False}
    api = gate.client.post("/api/v1/decisions", json={"server": "demo", "tool": "lookup"})
    assert api.status_code == 503 and api.headers["retry-after"] == "1"
    assert api.headers["content-security-policy"] == CONTENT_SECURITY_POLICY  # answered in front, secured

    assert gate.hook("Bash") == {}  # not an MCP tool: no opinion, as when decided
    unreadable = gate.client.post("/api/v1/hooks/claude-code", content=b"{not json")
    assert unreadable.status_code == 200 and permission(unreadable.json()) == "deny"
    assert unreadable.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert unreadable.headers["cache-control"] == "no-store"
    assert unanswered(gate) == {"max-waiting": 0.0, "max-wait": 8.0, "expected-wait": 0.0}

    lane.free, lane.max_wait = lane.at_once, 4
    assert permission(gate.hook("mcp__demo__lookup")) is None
    assert gate.client.post("/api/v1/decisions", json={"server": "demo", "tool": "lookup"}).status_code == 200


def test_deny_when_stale_decision_says_so(store: Store) -> None:
    for gate in lane_gate(store, stale_decision="deny"):
        full(gate)
        assert permission(gate.hook("mcp__demo__lookup")) == "deny"
        gemini = post(gate, "/api/v1/hooks/gemini-cli", gemini_input("mcp_demo_lookup", None, None))
        assert gemini["decision"] == "deny"


def test_a_full_queue_is_answered_at_once(store: Store) -> None:
    """With `max_waiting` requests waiting already (none allowed here), a call is answered without
    joining the queue: refused by the full queue, not left to time out at `max_wait` nor judged by the
    lane's pace (there is none)."""
    for gate in lane_gate(store, max_waiting=0):
        lane = full(gate)
        lane.max_wait = 4
        response = gate.client.post("/api/v1/hooks/claude-code", json=pre_tool_use("mcp__demo__lookup"))
        assert response.status_code == 200 and permission(response.json()) == "ask"
        assert unanswered(gate) == {"max-waiting": 1.0, "max-wait": 0.0, "expected-wait": 0.0}
        assert lane.queued == 0 and not lane.waiting, "it never waited for a slot"


def test_an_oversized_hook_input_is_still_answered_when_the_lane_is_full(store: Store) -> None:
    for gate in lane_gate(store):
        full(gate)
        big = {**pre_tool_use("mcp__demo__lookup"), "tool_input": {"q": "x" * 40_000_000}}
        response = gate.client.post("/api/v1/hooks/claude-code", json=big)
        assert response.status_code == 200 and permission(response.json()) == "deny"


# --- the lane itself ---------------------------------------------------------------------------


def test_slots_go_to_the_oldest_waiting_request_and_a_deadline_gives_up() -> None:
    async def scenario() -> list[str]:
        lane = DecisionLane(at_once=1, max_waiting=10, max_wait=60)
        order: list[str] = []
        far = time.monotonic() + 60
        assert await lane.enter(far)

        async def wait(name: str, deadline: float) -> None:
            admitted = await lane.enter(deadline)
            order.append(f"{name}:{admitted}")
            if admitted:
                lane.leave()

        first = asyncio.create_task(wait("first", far))
        expired = asyncio.create_task(wait("expired", time.monotonic()))
        cancelled = asyncio.create_task(wait("cancelled", far))
        second = asyncio.create_task(wait("second", far))
        await expired  # its deadline passed while the slot was held
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        lane.leave()
        await asyncio.gather(first, second)
        assert lane.free == 1 and lane.queued == 0 and lane.late == 1
        return order

    assert asyncio.run(scenario()) == ["expired:False", "first:True", "second:True"]


def test_a_call_that_would_wait_past_max_wait_at_the_lanes_pace_is_answered_at_once() -> None:
    """Two slots held, each for 20 s of late: the first two to wait would get a slot within the
    30 s `max_wait` (10 s, 20 s), the third not (30 s): it is answered at once, not after 30 s."""

    async def scenario() -> tuple[list[bool], int, int]:
        lane = DecisionLane(at_once=2, max_waiting=100, max_wait=30.0)
        deadline = time.monotonic() + lane.max_wait
        assert await lane.enter(deadline) and await lane.enter(deadline)
        lane.hold = 20.0
        waiters = [asyncio.create_task(lane.enter(deadline)) for _ in range(2)]
        await asyncio.sleep(0)  # both queued
        hopeless = await asyncio.wait_for(lane.enter(deadline), 10)
        lane.leave()
        lane.leave()
        admitted = list(await asyncio.gather(*waiters))
        for _ in admitted:
            lane.leave()
        return [*admitted, hopeless], lane.hopeless, lane.free

    assert asyncio.run(scenario()) == ([True, True, False], 1, 2)


def test_the_lanes_pace_is_how_long_admitted_requests_held_their_slots() -> None:
    lane = DecisionLane(at_once=2, max_waiting=100, max_wait=1.0)
    assert lane.hold is None  # no pace yet: a waiter waits, whatever the queue
    lane.free = 0
    lane.leave(0.5)
    assert lane.hold == 0.5
    lane.free = 0
    lane.leave(1.5)
    assert lane.hold == pytest.approx(0.5 + 0.2 * (1.5 - 0.5))


def test_waiters_queued_before_the_pace_was_known_are_answered_once_it_is() -> None:
    """The first burst after the start: with no pace yet, every request queues. The first slot given
    back (held 20 s: a turn every 10 s over two slots) gives the pace, and the waiters that no slot
    would reach within the 30 s `max_wait` are answered then; the others keep their places."""

    async def scenario() -> tuple[list[bool], int, int]:
        lane = DecisionLane(at_once=2, max_waiting=100, max_wait=30.0)
        deadline = time.monotonic() + lane.max_wait
        assert await lane.enter(deadline) and await lane.enter(deadline)
        waiters = [asyncio.create_task(lane.enter(deadline)) for _ in range(4)]
        await asyncio.sleep(0)
        assert lane.queued == 4  # no pace to refuse any of them
        lane.leave(20.0)  # the first waiter gets this slot; the last two cannot be reached in time
        answered = await asyncio.wait_for(asyncio.gather(*waiters[2:]), 10)
        lane.leave()
        lane.leave()
        admitted = await asyncio.gather(*waiters[:2])
        lane.leave()
        lane.leave()
        return [*admitted, *answered], lane.hopeless, lane.late

    assert asyncio.run(scenario()) == ([True, True, False, False], 2, 0)
