"""OpenTelemetry spans of polls and decisions (monitor/tracing.py): real polls of real servers on every
transport and real decisions, read from the SDK's in-memory exporter; and a real OTLP/HTTP export from
`drift-monitor poll`, which with no endpoint configured sets nothing up at all."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import SpanKind, StatusCode
from support import Receiver, cli, http_server, migrate_config, numbered_tools, refused_url, server_command
from support.gate import READ_ONLY_LOOKUP, WRITING_LOOKUP, gate_for
from support.gate import http_server as configured_http_server
from support.tracing import (
    attributes_of,
    children,
    recorded_spans,
    sent_meta,
    span_id,
    the_one,
    trace_id,
    traceparent,
)

from monitor import tracing
from monitor.approvals.policy import Verdict
from monitor.collect.poller import Poller
from monitor.config import Config, MonitorSettings, ServerConfig, load_config
from monitor.core.states import DecisionKind
from monitor.store import PollOutcome, Store

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
SECRET = "s3cret-token-0123456789"
TOOLS = numbered_tools(5)
"""Five tools three to a page: two pages, read twice (the second pass confirms the first)."""
ALLOWED = Verdict(DecisionKind.ALLOW, "approved", "Approved, and unchanged since.")
MESSAGES = {
    "handshake": ["initialize", "notifications/initialized", *["tools/list"] * 4],
    "modern": ["server/discover", *["tools/list"] * 4],
}


async def polled(store: Store, *servers: ServerConfig) -> list[PollOutcome]:
    config = Config(monitor=MonitorSettings(poll_timeout=30), servers=list(servers), source="t")
    poller = Poller(store, config)
    try:
        return await poller.poll(poller.jobs())
    finally:
        poller.close()


@pytest.mark.parametrize(
    ("transport", "era"),
    [("stdio", "handshake"), ("http", "handshake"), ("sse", "handshake"), ("http", "modern")],
)
async def test_a_poll_is_one_span_with_a_client_span_per_message_each_sent_to_the_server(
    store: Store, tmp_path: Path, transport: str, era: str
) -> None:
    """Polled untraced, then traced: the traced poll is one INTERNAL span, every message it sends a
    CLIENT span under it named as the MCP conventions name it, and the server got each message's own
    span as `traceparent` in `params._meta` (on stdio and SSE through the SDK's dispatcher, on
    Streamable HTTP through the poll's own). The untraced poll sent no trace context; the traced one
    found the same listing (the context changed nothing the fingerprint covers)."""
    tools_file, meta_file = tmp_path / "tools.json", tmp_path / "meta.jsonl"
    tools_file.write_text(json.dumps(TOOLS), encoding="utf-8")
    args = (str(tools_file), "--page-size", "3", "--record-meta", str(meta_file))
    with ExitStack() as stack:
        if transport == "stdio":
            command, *argv = server_command("fastmcp_server.py", *args)
            server = ServerConfig(name="traced", transport="stdio", command=command, args=argv, era=era)
        else:
            url = stack.enter_context(http_server("fastmcp_server.py", *args, transport=transport))
            server = ServerConfig(name="traced", transport=transport, url=url, era=era)
        (first,) = await polled(store, server)
        untraced = sent_meta(meta_file)
        meta_file.unlink()
        with recorded_spans() as exporter:
            (outcome,) = await polled(store, server)
        spans = exporter.get_finished_spans()

    assert first.new_version and untraced and all("traceparent" not in meta for _, meta in untraced)
    assert outcome.ok and not outcome.new_version and outcome.fingerprint == first.fingerprint
    version = HANDSHAKE if era == "handshake" else MODERN
    poll = the_one(spans, "poll traced")
    assert poll.kind == SpanKind.INTERNAL and poll.parent is None
    assert poll.status.status_code == StatusCode.UNSET
    assert poll.instrumentation_scope is not None and poll.instrumentation_scope.name == "drift-monitor"
    assert (
        attributes_of(poll).items()
        >= {
            "drift_monitor.server.name": "traced",
            "drift_monitor.mcp.transport": transport,
            "network.transport": "pipe" if transport == "stdio" else "tcp",
            "mcp.protocol.version": version,
            "drift_monitor.poll.outcome": "unchanged",
            "drift_monitor.poll.tools": 5,
            "drift_monitor.poll.version": 1,
        }.items()
    )
    messages = children(spans, poll)
    assert len(spans) == 1 + len(messages), "every span is the poll's or one of its messages'"
    assert [span.name for span in messages] == MESSAGES[era]
    request_ids = []
    for span in messages:
        attributes = attributes_of(span)
        assert span.kind == SpanKind.CLIENT and trace_id(span) == trace_id(poll)
        assert span.status.status_code == StatusCode.UNSET and "error.type" not in attributes
        assert attributes["mcp.method.name"] == span.name and attributes["mcp.protocol.version"] == version
        if span.name.startswith("notifications/"):
            assert "jsonrpc.request.id" not in attributes
        else:
            request_ids.append(attributes["jsonrpc.request.id"])
        if transport == "stdio":
            assert attributes["network.transport"] == "pipe" and "server.address" not in attributes
        else:
            assert attributes["network.transport"] == "tcp" and attributes["network.protocol.name"] == "http"
            assert attributes["network.protocol.version"] == "1.1"
            assert attributes["server.address"] == "127.0.0.1"
            assert attributes["server.port"] == urlsplit(server.url).port
    assert len(set(request_ids)) == len(request_ids), request_ids
    sessions = {attributes_of(span).get("mcp.session.id") for span in messages}
    if (transport, era) == ("http", "handshake"):  # the stateful handshake era names its session
        assert len(sessions) == 1 and None not in sessions
    else:
        assert sessions == {None}

    received = sent_meta(meta_file)
    assert [method for method, _ in received] == MESSAGES[era]
    for (method, meta), span in zip(received, messages, strict=True):
        assert traceparent(meta) == (trace_id(poll), span_id(span)), method


async def test_a_failed_poll_and_its_failed_message_say_why_and_keep_secrets_out(
    store: Store, tmp_path: Path
) -> None:
    """A server answering tools/list with a JSON-RPC error that echoes a secret: the poll span's
    `error.type` is the poll's error kind, the tools/list span's the JSON-RPC code (also as
    `rpc.response.status_code`), both ERROR, and neither holds the secret. A server that refuses the
    connection: `connect`, and the initialize span failed with the exception's name."""
    command, *argv = server_command("hostile_server.py", "rpc-error")
    erring = ServerConfig(
        name="erring", transport="stdio", command=command, args=argv, env={"DRIFT_TEST_SECRET": SECRET}
    )
    gone = ServerConfig(name="gone", transport="http", url=refused_url())
    with recorded_spans() as exporter:
        outcomes = await polled(store, erring, gone)
    spans = exporter.get_finished_spans()
    assert [outcome.error_kind for outcome in outcomes] == ["server-error", "connect"]

    poll = the_one(spans, "poll erring")
    assert poll.status.status_code == StatusCode.ERROR and poll.status.description == outcomes[0].error
    failed = {"error.type": "server-error", "drift_monitor.poll.outcome": "failed"}
    assert attributes_of(poll).items() >= failed.items()
    listed = children(spans, poll)[-1]
    assert listed.name == "tools/list" and listed.status.status_code == StatusCode.ERROR
    rpc_error = {"error.type": "-32603", "rpc.response.status_code": "-32603"}
    assert attributes_of(listed).items() >= rpc_error.items()
    assert listed.status.description == "boom (token [redacted])"
    assert [span.name for span in children(spans, poll)] == MESSAGES["handshake"][:3]
    for span in spans:
        assert SECRET not in f"{span.status.description} {attributes_of(span)}", span.name

    refused = the_one(spans, "poll gone")
    assert refused.status.status_code == StatusCode.ERROR
    assert attributes_of(refused)["error.type"] == "connect"
    (initialize,) = children(spans, refused)
    attributes = attributes_of(initialize)
    assert initialize.name == "initialize" and initialize.status.status_code == StatusCode.ERROR
    assert attributes["error.type"] and "rpc.response.status_code" not in attributes


def test_a_decision_is_one_span_with_its_answer_its_reasons_and_who_asked(store: Store) -> None:
    """A tool that lost its read-only hint, asked about by Claude Code's hook and by the decision API:
    each decision is one span of its own (a root: nothing traced the request), with the answer and
    reasons the caller got, the server, the tool and the host adapter that asked."""
    for gate in gate_for(store, [configured_http_server("demo")]):
        gate.poll("demo", [READ_ONLY_LOOKUP])
        gate.clock[0] += timedelta(seconds=1)
        gate.poll("demo", [WRITING_LOOKUP])
        with recorded_spans() as exporter:
            hooked = gate.hook("mcp__demo__lookup")["hookSpecificOutput"]
            after_hook = exporter.get_finished_spans()
            answered = gate.decide("demo", "lookup")
            spans = exporter.get_finished_spans()

    assert hooked["permissionDecision"] == "deny" and answered["decision"] == "deny"
    assert [span.name for span in after_hook] == ["decide lookup"]
    assert [span.name for span in spans] == ["decide lookup", "decide lookup"]
    for span, host in zip(spans, ["claude-code", None], strict=True):
        attributes = attributes_of(span)
        assert span.kind == SpanKind.INTERNAL and span.parent is None
        assert attributes["drift_monitor.decision"] == "deny"
        assert list(attributes["drift_monitor.decision.reasons"]) == answered["reasons"]
        assert attributes["drift_monitor.decision.reason"] == answered["reason"]
        assert attributes["drift_monitor.server.name"] == "demo"
        assert attributes["gen_ai.tool.name"] == "lookup"
        assert attributes.get("drift_monitor.decision.host") == host
    assert answered["reasons"] == ["changed-since-approval"]


def test_the_service_name_is_the_configured_one_unless_the_environment_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    with recorded_spans("configured-name") as exporter:
        tracing.decided("s", "t", ALLOWED, None)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "named-by-env")
    with recorded_spans("configured-name") as named:
        tracing.decided("s", "t", ALLOWED, None)
    (configured,), (from_env,) = exporter.get_finished_spans(), named.get_finished_spans()
    assert configured.resource.attributes["service.name"] == "configured-name"
    assert from_env.resource.attributes["service.name"] == "named-by-env"


def test_the_environment_turns_tracing_on_and_wins_over_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*tracing.ENDPOINT_VARIABLES, "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.wanted(None) and tracing.endpoint(None) is None
    assert tracing.wanted("http://collector:4318")
    assert tracing.endpoint("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert tracing.start(None, "drift-monitor") is False, "no endpoint: nothing set up"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4318")
    assert tracing.wanted(None)
    assert tracing.endpoint("http://collector:4318") is None, "the exporter reads the environment's"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.wanted("http://collector:4318")


def test_drift_monitor_poll_exports_over_otlp_only_when_an_endpoint_is_configured(tmp_path: Path) -> None:
    """`drift-monitor poll` without `[tracing]`: the OpenTelemetry SDK is never imported, the server
    gets no trace context and nothing is exported. With `otlp_endpoint`: the spans are POSTed as
    OTLP/HTTP protobuf to its `/v1/traces` under the configured service name, and the trace the
    server was sent is the exported one."""
    tools_file, meta_file = tmp_path / "tools.json", tmp_path / "meta.jsonl"
    tools_file.write_text(json.dumps(TOOLS[:2]), encoding="utf-8")
    command, *argv = server_command("fastmcp_server.py", str(tools_file), "--record-meta", str(meta_file))
    server = f"[[servers]]\nname = 'local'\ntransport = 'stdio'\ncommand = {command!r}\nargs = {argv!r}\n"
    database = f"[monitor]\ndatabase_url = 'sqlite:///{tmp_path / 'db.sqlite'}'\n"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    untraced, traced = tmp_path / "untraced.toml", tmp_path / "traced.toml"
    untraced.write_text(database + server, encoding="utf-8")
    migrate_config(untraced, env)

    def poll(config: Path) -> str:
        argv = cli("poll", "--config", str(config))
        argv[1:1] = ["-X", "importtime"]  # every module imported, on stderr
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stderr

    with Receiver() as receiver:
        imported = poll(untraced)
        assert "opentelemetry.sdk" not in imported and "opentelemetry.exporter" not in imported
        assert sent_meta(meta_file) and all("traceparent" not in meta for _, meta in sent_meta(meta_file))
        assert receiver.requests == []
        meta_file.unlink()

        endpoint = receiver.url.removesuffix("/hook")
        tracing_section = f"[tracing]\notlp_endpoint = '{endpoint}'\nservice_name = 'drift-monitor-ci'\n"
        traced.write_text(database + server + tracing_section, encoding="utf-8")
        assert load_config(traced).tracing.otlp_endpoint == endpoint
        assert "opentelemetry.sdk.trace" in poll(traced)
        assert receiver.wait_received(1), "the spans are exported before the command exits"
    (request,) = receiver.requests
    assert request.path == "/v1/traces" and request.headers["content-type"] == "application/x-protobuf"
    exported = ExportTraceServiceRequest.FromString(request.body)
    (resource_spans,) = exported.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    spans = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert service == "drift-monitor-ci"
    assert sorted(span.name for span in spans) == sorted(["poll local", *MESSAGES["handshake"][:3]])
    (trace,) = {span.trace_id.hex() for span in spans}
    sent = sent_meta(meta_file)
    assert sent and {traceparent(meta)[0] for _, meta in sent} == {trace}
    assert {traceparent(meta)[1] for _, meta in sent} == {
        span.span_id.hex() for span in spans if span.name != "poll local"
    }
