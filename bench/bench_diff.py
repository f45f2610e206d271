"""Diff a 5,000-tool listing against a copy with 10 changed tools; compare with DeepDiff.

Goal (issue 2): ours under 100 ms and at least 3x faster than the generic deep diff, while also
classifying every change.
"""

from __future__ import annotations

import copy
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import common  # noqa: F401  (the import path: the repository root and tests/)
from deepdiff import DeepDiff
from support.tools import tool

from monitor.core.diff import diff_canonical, diff_listings
from monitor.core.fingerprint import CanonicalListing

WORDS = [
    *("index", "search", "record", "tenant", "rebuild", "query", "result", "page", "cursor", "store"),
    *("primary", "replica", "export", "import", "schedule", "retry", "window", "incident", "runbook"),
    *("status", "metric", "alert", "deploy", "rollback", "archive"),
]


def make_tool(rng: random.Random, index: int) -> dict[str, Any]:
    description = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 70)))
    properties = {
        f"arg{k}": {
            "type": rng.choice(["string", "integer", "boolean"]),
            "description": " ".join(rng.choice(WORDS) for _ in range(8)),
        }
        for k in range(rng.randint(2, 6))
    }
    properties["filter"] = {
        "type": "object",
        "properties": {"field": {"type": "string"}, "values": {"type": "array", "items": {"type": "string"}}},
    }
    return tool(
        f"tool_{index:05d}",
        title=f"Tool {index}",
        description=description,
        input_schema={"type": "object", "properties": properties, "required": ["arg0"]},
        annotations={"readOnlyHint": rng.random() < 0.5, "openWorldHint": rng.random() < 0.3},
    )


def make_pair(count: int = 5000, changed: int = 10) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(7)
    old = [make_tool(rng, i) for i in range(count)]
    new = copy.deepcopy(old)
    for i, definition in enumerate(rng.sample(new, changed)):
        if i % 3 == 0:
            definition["annotations"]["readOnlyHint"] = not definition["annotations"]["readOnlyHint"]
        elif i % 3 == 1:
            definition["description"] += " Also deletes stale replicas."
        else:
            definition["inputSchema"]["properties"]["extra"] = {"type": "string"}
            definition["inputSchema"]["required"].append("extra")
    return old, new


def median_seconds(work: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> list[tuple[str, float, float, str]]:
    old, new = make_pair()
    size_mb = len(json.dumps(old).encode()) / 1e6
    old_index, new_index = CanonicalListing.of(old), CanonicalListing.of(new)
    findings = diff_canonical(old_index, new_index).findings
    index = median_seconds(lambda: CanonicalListing.of(new), repeat=7)
    indexed = median_seconds(lambda: diff_canonical(old_index, new_index), repeat=9)
    end_to_end = median_seconds(lambda: diff_listings(old, new), repeat=7)
    generic = median_seconds(lambda: DeepDiff(old, new), repeat=3)
    print(f"listing: {len(old)} tools ({size_mb:.1f} MB of JSON), 10 changed -> {len(findings)} findings")
    print(f"fingerprint + index one listing (once per poll): {index * 1000:8.1f} ms")
    print(f"diff of two indexed listings, classified:        {indexed * 1000:8.1f} ms  (goal < 100 ms)")
    print(f"end to end: index both + diff (the CLI's work):  {end_to_end * 1000:8.1f} ms")
    print(f"DeepDiff(old, new), same pair, same run:         {generic * 1000:8.1f} ms")
    print(
        f"speed-up end to end: {generic / end_to_end:.1f}x, diff alone: {generic / indexed:.0f}x (goal >= 3x)"
    )
    return [
        ("diff 5,000 tools, indexed (ms) vs DeepDiff", indexed * 1000, generic * 1000, "<100 ms, >=3x"),
        ("diff 5,000 tools, end to end (ms) vs DeepDiff", end_to_end * 1000, generic * 1000, ">=3x"),
    ]


if __name__ == "__main__":
    main()
