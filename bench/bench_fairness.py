"""Does a healthy server keep its interval while slow or oversized servers are polled beside it?

Goal (issue 28, item 2): the healthy server's interval kept within 10% in both cases of the issue:

- `huge`: two servers answering every poll with a listing of about 20 MB (20,000 tools, over the
  16 MB `max_listing_bytes`: refused every time), polled every second, beside a healthy server
  (50 tools) on a 2 s interval;
- `slow`: 500 servers answering `tools/list` after 8 s (inside the 10 s timeout), on a 30 s interval
  (their first polls spread over it, as `register` spreads them), beside a healthy server on a 5 s
  interval, with the default `poll_concurrency` of 32.

The servers are `raw_fleet.py` processes (`--huge-tools`, `--delay`). The monitor is `Scheduler` +
`Poller` + `Store` as `serve` runs them, on a fresh SQLite file, in a process of its own, for
`--seconds` per case; the healthy server's polls are then read from the database (marks and attempt
rows) and the gaps between their starts reported: median, worst, and how many were over 110% of its
interval (the first poll, at a random slot, is not a gap). `--before REV` runs each case against the
code of git revision REV first (extracted with `git archive`), in the same run.

    python bench/bench_fairness.py [--before REV] [--cases huge,slow] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import common

BENCH = Path(__file__).resolve().parent
CASES: dict[str, dict[str, Any]] = {
    "huge": {"healthy": 2.0, "hostile": 2, "interval": 1.0, "fleet": ["--huge-tools", "20000"]},
    "slow": {"healthy": 5.0, "hostile": 500, "interval": 30.0, "fleet": ["--delay", "8"]},
}
KEPT = 1.1
"""A gap counts as kept up to 110% of the interval."""


@contextmanager
def fleet(count: int, extra: list[str]) -> Any:
    argv = [sys.executable, str(BENCH / "raw_fleet.py"), "--servers", str(count), *extra]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("READY "):
            raise RuntimeError(f"raw fleet did not start: {line!r}")
        yield line.split()[1:], process.pid
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


# --- the monitor's process --------------------------------------------------------------------------


async def contend(
    case: str, healthy: str, hostile: list[str], seconds: float, database: Path
) -> dict[str, Any]:
    from sqlalchemy import select

    from monitor.collect.poller import Poller
    from monitor.collect.scheduler import LeaseRelease, Scheduler, instance_id
    from monitor.config import Config, MonitorSettings, ServerConfig
    from monitor.notify.alerts import alerting_store
    from monitor.service.runtime import long_running_heap
    from monitor.store import make_engine, migrate
    from monitor.store.marks import from_epoch_ms
    from monitor.store.models import PollAttempt, PollMark, Server

    spec = CASES[case]
    url = f"sqlite:///{database}"
    servers = [ServerConfig(name="healthy", transport="http", url=healthy, interval=spec["healthy"])]
    servers += [
        ServerConfig(name=f"h{i:03d}", transport="http", url=u, interval=spec["interval"])
        for i, u in enumerate(hostile)
    ]
    config = Config(
        monitor=MonitorSettings(database_url=url, poll_interval=spec["interval"], poll_timeout=10),
        servers=servers,
        source="bench",
    )
    engine = make_engine(url)
    migrate(engine)
    owner = instance_id()
    store, _ = alerting_store(engine, config, hooks=[LeaseRelease(owner)])
    poller = Poller(store, config)
    scheduler = Scheduler(store, poller, config, owner)
    scheduler.register(datetime.now(UTC))
    cpu0, wall0 = common.cpu_seconds(), time.monotonic()
    with long_running_heap():
        scheduler.start()
        await asyncio.sleep(seconds)
        await scheduler.stop(grace=0)
    cpu = (common.cpu_seconds() - cpu0) / (time.monotonic() - wall0)
    poller.close()
    with store.sessions() as session:
        sid = session.scalar(select(Server.id).where(Server.name == "healthy"))
        starts = [
            from_epoch_ms(ms)
            for (ms,) in session.execute(select(PollMark.started_ms).where(PollMark.server_id == sid))
        ]
        starts += [
            at
            for (at,) in session.execute(select(PollAttempt.started_at).where(PollAttempt.server_id == sid))
        ]
    engine.dispose()
    starts.sort()
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    return {"gaps": gaps, "polls": len(starts), "cpu": cpu}


# --- the run ----------------------------------------------------------------------------------------


def run_case(
    case: str, name: str, tree: str | None, urls: tuple[str, list[str]], seconds: float, folder: Path
) -> dict[str, Any]:
    urls_file = folder / f"{case}-{name}.json"
    urls_file.write_text(json.dumps({"healthy": urls[0], "hostile": urls[1]}))
    argv = [
        sys.executable,
        __file__,
        "--contend",
        case,
        "--urls-file",
        str(urls_file),
        "--seconds",
        str(seconds),
    ]
    argv += ["--database", str(folder / f"{case}-{name}.db"), *(["--tree", tree] if tree else [])]
    load, (busy0, total0) = os.getloadavg()[0], common.machine_busy()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=seconds * 4 + 300)
    if done.returncode != 0:
        raise RuntimeError(f"{case} [{name}] failed:\n{done.stderr[-3000:]}")
    busy1, total1 = common.machine_busy()
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"], result["busy"] = load, (busy1 - busy0) / max(1, total1 - total0)
    return result


def line(case: str, name: str, result: dict[str, Any]) -> str:
    interval = CASES[case]["healthy"]
    gaps = result["gaps"]
    over = sum(gap > KEPT * interval for gap in gaps)
    return (
        f"  {name:<7} healthy polls {result['polls']:>3}  gap p50 {common.quantile(gaps, 0.5):6.2f} s  "
        f"worst {max(gaps, default=float('nan')):6.2f} s  (interval {interval:.0f} s; over 110%: {over} of "
        f"{len(gaps)})  monitor {100 * result['cpu']:.0f}% of a core  (load {result['load']:.1f}, machine "
        f"{100 * result['busy']:.0f}% busy)"
    )


def main(argv: list[str] | None = None) -> list[tuple[str, float, float, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a git revision to measure first, in the same run")
    parser.add_argument("--cases", default="huge,slow")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--contend")
    parser.add_argument("--urls-file")
    parser.add_argument("--database")
    parser.add_argument("--tree")
    args = parser.parse_args([] if argv is None else argv)
    if args.contend:
        if args.tree:
            sys.path[:0] = [args.tree]
            for module in [m for m in sys.modules if m == "monitor" or m.startswith("monitor.")]:
                del sys.modules[module]
        urls = json.loads(Path(args.urls_file).read_text())
        result = asyncio.run(
            contend(args.contend, urls["healthy"], urls["hostile"], args.seconds, Path(args.database))
        )
        print(json.dumps(result))
        return []
    figures = []
    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        before = stack.enter_context(common.code_at(args.before)) if args.before else None
        contenders = [("before", before), ("now", None)] if before else [("now", None)]
        for case in args.cases.split(","):
            spec = CASES[case]
            with fleet(1, []) as (healthy, _), fleet(spec["hostile"], spec["fleet"]) as (hostile, _):
                print(
                    f"{case}: {spec['hostile']} hostile servers every {spec['interval']:.0f} s, the healthy "
                    f"one every {spec['healthy']:.0f} s, for {args.seconds:.0f} s",
                    flush=True,
                )
                worst = {}
                for name, tree in contenders:
                    result = run_case(case, name, tree, (healthy[0], hostile), args.seconds, Path(folder))
                    print(line(case, name, result), flush=True)
                    worst[name] = max(result["gaps"], default=float("nan"))
                figures.append(
                    (
                        f"fairness {case}: healthy worst gap s",
                        worst["now"],
                        worst.get("before", spec["healthy"] * KEPT),
                        f"<= {spec['healthy'] * KEPT:.1f}",
                    )
                )
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
