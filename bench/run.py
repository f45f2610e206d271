"""Run every benchmark and print one table: figure, ours, baseline (same run), ratio, goal."""

from __future__ import annotations

import importlib
import sys

import common  # noqa: F401  (the import path: the repository root and tests/)

BENCHMARKS = [
    "bench_diff",
    "bench_poisoning",
    "bench_listing_check",
    "bench_poll",
    "bench_web",
    "bench_triage",
    "bench_serve",
    "bench_scale",
    "bench_fleet",
    "bench_latency",
    "bench_decisions",
    "bench_hook_burst",
    "bench_hook_command",
    "bench_refusals",
    "bench_hostile_pages",
    "bench_throughput",
    "bench_writer",
    "bench_gateway",
]


def main() -> None:
    names = sys.argv[1:] or BENCHMARKS
    rows = []
    for name in names:
        print(f"== {name}", flush=True)
        rows.extend(importlib.import_module(name).main())
    print()
    print(f"{'figure':<48} {'ours':>12} {'baseline':>12} {'ratio':>8}  goal")
    for figure, ours, baseline, goal in rows:
        ratio = baseline / ours if ours else float("inf")
        print(f"{figure:<48} {ours:>12.2f} {baseline:>12.2f} {ratio:>7.2f}x  {goal}")


if __name__ == "__main__":
    main()
