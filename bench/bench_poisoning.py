"""What judging model-visible text costs (docs/contract.md section 14) on a 5,000-tool listing.

    python bench/bench_poisoning.py [--tools 5000]

Four figures, each the median CPU time of a few runs in this process, beside the baseline every
new listing pays anyway in the same run (checking, canonicalising and fingerprinting it):

- first sight, cold: every text of every tool judged, as at a server's first poll, with nothing
  remembered (the judged texts' cache cleared first);
- first sight, warm: the same again, texts remembered (a second instance of the same server);
- a diff with 500 of the 5,000 tools changed (one sentence added to each), content rules judging
  only what changed, beside the same diff with the content rules left out;
- the diff of bench_diff's 10 changes: what most new versions cost.

The machine is shared: read the figures against the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import common  # noqa: F401  (the import path: the repository root and tests/)
from bench_diff import make_pair, make_tool

from monitor.core import poison
from monitor.core.diff import diff_canonical, first_sight
from monitor.core.fingerprint import CanonicalListing
from monitor.core.rules import TOOL_CHECKS
from monitor.core.rules.catalog import CATALOG


def cpu_seconds(
    work: Callable[[], object], repeat: int, before: Callable[[], object] = lambda: None
) -> float:
    samples = []
    for _ in range(repeat):
        before()
        start = time.process_time()
        work()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def main(count: int = 5000) -> list[tuple[str, float, float, str]]:
    import random

    rng = random.Random(11)
    tools = [make_tool(rng, i) for i in range(count)]
    changed = copy.deepcopy(tools)
    for definition in changed[::10]:
        definition["description"] += " Results are paged: pass the cursor to get the next page."
    listing, edited = CanonicalListing.of(tools), CanonicalListing.of(changed)
    baseline = cpu_seconds(lambda: CanonicalListing.of(tools), repeat=3)
    cold = cpu_seconds(lambda: first_sight(listing), repeat=3, before=poison._remembered.cache_clear)
    warm = cpu_seconds(lambda: first_sight(listing), repeat=3)
    with_content = cpu_seconds(
        lambda: diff_canonical(listing, edited), repeat=3, before=poison._remembered.cache_clear
    )
    content = {rule_id for rule_id, rule in CATALOG.items() if rule.family == "poisoning"}
    saved = dict(TOOL_CHECKS)
    for rule_id in content & set(saved):
        del TOOL_CHECKS[rule_id]
    try:
        without = cpu_seconds(lambda: diff_canonical(listing, edited), repeat=3)
    finally:
        TOOL_CHECKS.update(saved)
    old, new = make_pair()
    small_old, small_new = CanonicalListing.of(old), CanonicalListing.of(new)
    small = cpu_seconds(
        lambda: diff_canonical(small_old, small_new), repeat=5, before=poison._remembered.cache_clear
    )
    print(f"listing: {count} tools")
    print(f"check + canonicalise + fingerprint it (baseline): {baseline * 1000:9.1f} ms")
    print(f"first sight, every text judged, cold:            {cold * 1000:9.1f} ms")
    print(f"first sight again, texts remembered:             {warm * 1000:9.1f} ms")
    print(f"diff, 500 tools changed, with content rules:     {with_content * 1000:9.1f} ms")
    print(f"the same diff without the content rules:         {without * 1000:9.1f} ms")
    print(f"diff, 10 tools changed (bench_diff's pair):      {small * 1000:9.1f} ms")
    return [
        ("first sight of 5,000 tools, cold (ms) vs indexing", cold * 1000, baseline * 1000, "report"),
        ("first sight, texts remembered (ms) vs indexing", warm * 1000, baseline * 1000, "report"),
        (
            "diff of 500 changed tools (ms) vs without content rules",
            with_content * 1000,
            without * 1000,
            "report",
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tools", type=int, default=5000)
    main(parser.parse_args().tools)
