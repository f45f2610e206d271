"""What the benchmarks share: the import path, one quantile, and what /proc says about a process.

Every benchmark imports this module first (`import common`): bench/ is on sys.path when a bench
script runs, and bench/run.py imports the benchmarks by name from there. Importing it puts the
repository root (for `monitor`, whether or not it is installed) and tests/ (for `support`, the
processes, servers, fleet and recorded polls the tests use too) at the front of sys.path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "tests"):
    sys.path.insert(0, str(folder))

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def quantile(values: list[float], q: float) -> float:
    """The `q` quantile of `values` (0.99: the p99), as the value of rank int(n * q) of the sorted
    values (the largest, at most); NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def rss_mb(pid: int | None = None) -> float:
    """The resident memory of process `pid` (default: this one) in MB, from /proc."""
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int | None = None) -> float:
    """The CPU time (user + system) process `pid` (default: this one) has used so far, from /proc."""
    fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_SECOND


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@contextmanager
def code_at(revision: str) -> Iterator[str]:
    """The repository's tree at `revision`, extracted into a temporary folder: the code "before" that
    a benchmark's `--before REV` measures in the same run as today's."""
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        yield folder
