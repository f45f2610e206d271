"""OpenTelemetry tracing (monitor/tracing.py) set up through its own `start`: where spans go and
under which service name, the environment winning over the file as it does everywhere."""

from __future__ import annotations

import pytest
from support.tracing import recorded_spans

from monitor import tracing
from monitor.approvals.policy import Verdict
from monitor.core.states import DecisionKind

ALLOWED = Verdict(DecisionKind.ALLOW, "approved", "Approved, and unchanged since.")


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
