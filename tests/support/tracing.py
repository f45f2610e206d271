"""Spans as the tests read them: `monitor.tracing` started through its own `start` on the OpenTelemetry
SDK's in-memory exporter (no mock), and the trace context a test server was sent (fastmcp_server.py
`--record-meta`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor import tracing


@contextmanager
def recorded_spans(service_name: str = "drift-monitor-test") -> Iterator[InMemorySpanExporter]:
    """Tracing on, every span handed to the exporter as it ends; off again on the way out."""
    exporter = InMemorySpanExporter()
    assert tracing.start(None, service_name, exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.stop()


def span_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.span_id:016x}"


def trace_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def parent_id(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def attributes_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def the_one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    """The span named `name`, which must be the only one."""
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    """The spans whose parent is `parent`, in the order they started."""
    found = [span for span in spans if parent_id(span) == span_id(parent)]
    return sorted(found, key=lambda span: span.start_time or 0)


def sent_meta(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """Each request and notification the server got, in order: its method and its `params._meta`."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(entry["method"], entry["meta"]) for entry in map(json.loads, lines)]


def traceparent(meta: dict[str, Any]) -> tuple[str, str]:
    """(trace id, parent span id) of a W3C `traceparent` in `_meta`."""
    version, trace, parent, flags = meta["traceparent"].split("-")
    assert version == "00" and len(trace) == 32 and len(parent) == 16 and len(flags) == 2
    return trace, parent
