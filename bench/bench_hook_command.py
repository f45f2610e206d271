"""The command hook's own cost: `drift-monitor hook claude-code --url URL`, end to end.

Goal (issue 29): well under 100 ms of its own time, that is its median minus the median of
`python -c pass` measured in the same run.

Claude Code runs a command hook as a new process before each MCP tool call, with the `PreToolUse`
input on stdin, and waits for it. Here the hook runs as `python -m monitor.cli hook claude-code --url
URL` with this interpreter (the venv's, under `deploy/dev.py bench`), against the app served as
`bench_decisions` serves it (a listener from `monitor.service._listen` handed to uvicorn, one
process) over a SQLite file of 10 servers of 20 tools, polled a few minutes ago. Each command below is
one fresh process, timed from spawning it to its exit (stdin written, stdout read); the commands run
round-robin, ROUNDS times each in a shuffled order per round, so load that comes and goes on a shared
machine falls on all of them alike, after one untimed run each (byte-code cached):

- `python -c pass`: the interpreter's start-up, the floor every command hook pays;
- `python -c "import monitor.cli"`: the dispatcher `drift-monitor` loads first;
- `python -c "import monitor.approvals.hookcommand"`: the hook's module and its standard-library imports;
- the hook with a `Bash` tool's input: not an MCP tool, answered `{}` without asking the monitor;
- the hook with an approved MCP tool's input (`{}` from the monitor) and with a flipped tool's (a deny):
  end to end, one HTTP request on a new connection;
- `python -m monitor.cli --version`: any other command, which loads the whole command line.

Then `python -X importtime -c "import monitor.approvals.hookcommand"` (median of 5): the cumulative
import time of the hook's module, and of its largest imports, next to `monitor.cli.app`'s.

    python bench/bench_hook_command.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import common
from bench_decisions import TOKEN, app_process, build, pre_tool_use

ROUNDS = 30
SERVERS = 10
IMPORTTIME_RUNS = 5
GOAL_MS = 100.0
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


@dataclass(frozen=True)
class Command:
    label: str
    args: list[str]
    stdin: bytes = b""
    expect: str | None = None
    """A string the command's stdout must hold (None: anything, exit 0)."""


def commands(url: str) -> list[Command]:
    python = sys.executable
    hook = [python, "-m", "monitor.cli", "hook", "claude-code", "--url", url]
    rng = random.Random(29)
    session = "3f1c9a52-7b7e-4d1e-9a0e-5a1f2b3c4d5e"
    bash = {**pre_tool_use("s001", "tool_01", session, rng), "tool_name": "Bash"}
    bash["tool_input"] = {"command": "ls", "description": "List files"}
    approved = pre_tool_use("s001", "tool_01", session, rng)
    flipped = pre_tool_use("s000", "tool_00", session, rng)
    return [
        Command("python -c pass", [python, "-c", "pass"]),
        Command('python -c "import monitor.cli"', [python, "-c", "import monitor.cli"]),
        Command(
            'python -c "import monitor.approvals.hookcommand"',
            [python, "-c", "import monitor.approvals.hookcommand"],
        ),
        Command("hook, Bash (no request)", hook, json.dumps(bash).encode(), "{}"),
        Command("hook, approved MCP tool ({})", hook, json.dumps(approved).encode(), "{}"),
        Command("hook, flipped MCP tool (deny)", hook, json.dumps(flipped).encode(), '"deny"'),
        Command("python -m monitor.cli --version", [python, "-m", "monitor.cli", "--version"]),
    ]


def timed(command: Command, env: dict[str, str]) -> float:
    """One run, in ms; the command must exit 0 with what it should print."""
    started = time.perf_counter()
    done = subprocess.run(command.args, input=command.stdin, capture_output=True, env=env, check=False)
    took = (time.perf_counter() - started) * 1000
    out = done.stdout.decode()
    if done.returncode != 0 or (command.expect is not None and command.expect not in out):
        raise RuntimeError(f"{command.label}: exit {done.returncode}, {out!r} {done.stderr.decode()!r}")
    return took


def import_times(module: str, env: dict[str, str]) -> dict[str, list[int]]:
    """`python -X importtime -c "import MODULE"`, IMPORTTIME_RUNS times: each module's cumulative
    microseconds, for the module and the modules it imported directly."""
    found: dict[str, list[int]] = {}
    for _ in range(IMPORTTIME_RUNS):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            env=env,
            check=True,
            text=True,
        )
        lines = [m for m in map(IMPORT_LINE.match, done.stderr.splitlines()) if m]
        end = next(i for i, m in enumerate(lines) if m.group(4) == module)
        depth = len(lines[end].group(3))
        start = end
        while start > 0 and len(lines[start - 1].group(3)) > depth:
            start -= 1
        for m in [*lines[start:end], lines[end]]:
            if m is lines[end] or len(m.group(3)) == depth + 2:  # the module, and its direct imports
                found.setdefault(m.group(4), []).append(int(m.group(2)))
    return found


def main(rounds: int = ROUNDS) -> list[tuple[str, float, float, str]]:
    env = {**os.environ, "DRIFT_MONITOR_API_TOKEN": TOKEN}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as folder:
        database_url = f"sqlite:///{Path(folder) / 'hook.db'}"
        build(database_url, servers=SERVERS)
        with app_process(database_url, "fixed") as app:
            todo = commands(f"http://127.0.0.1:{app.port}")
            for command in todo:
                timed(command, env)  # byte-code cached, the app's views built
            samples: dict[str, list[float]] = {command.label: [] for command in todo}
            load = os.getloadavg()[0]
            busy0, total0 = common.machine_busy()
            rng = random.Random(30)
            for _ in range(rounds):
                order = list(todo)
                rng.shuffle(order)
                for command in order:
                    samples[command.label].append(timed(command, env))
            busy1, total1 = common.machine_busy()
    busy = (busy1 - busy0) / max(1, total1 - total0)
    floor = statistics.median(samples["python -c pass"])
    print(
        f"{rounds} runs each, round-robin (load average {load:.1f} at the start, {os.getloadavg()[0]:.1f}"
        f" at the end, on {os.cpu_count()} cores; the machine {busy:.0%} busy):"
    )
    print()
    print("| command | median ms | p90 ms | median minus `python -c pass` |")
    print("|---|---|---|---|")
    for label, values in samples.items():
        median = statistics.median(values)
        print(f"| `{label}` | {median:.1f} | {common.quantile(values, 0.9):.1f} | {median - floor:+.1f} |")
    hook_times = import_times("monitor.approvals.hookcommand", env)
    app_times = import_times("monitor.cli.app", env)
    print()
    print(f"`python -X importtime`, cumulative ms, median of {IMPORTTIME_RUNS} runs:")
    print()
    print("| module | cumulative ms |")
    print("|---|---|")
    hook_ms = statistics.median(hook_times["monitor.approvals.hookcommand"]) / 1000
    print(f"| `monitor.approvals.hookcommand` | {hook_ms:.1f} |")
    direct = sorted(
        (
            (statistics.median(v) / 1000, name)
            for name, v in hook_times.items()
            if name != "monitor.approvals.hookcommand"
        ),
        reverse=True,
    )
    for ms, name in direct[:5]:
        print(f"| - `{name}`, within it | {ms:.1f} |")
    app_ms = statistics.median(app_times["monitor.cli.app"]) / 1000
    print(f"| `monitor.cli.app` (every other command) | {app_ms:.1f} |")
    hook = samples["hook, approved MCP tool ({})"]
    own = statistics.median(hook) - floor
    print()
    print(
        f"the hook's own time (approved MCP tool, median minus python -c pass): {own:.1f} ms"
        f" (goal: well under {GOAL_MS:.0f} ms)"
    )
    return [
        ("hook command median ms (vs python -c pass)", statistics.median(hook), floor, "own time < 100 ms"),
        (
            "hook command p90 ms (vs python -c pass)",
            common.quantile(hook, 0.9),
            common.quantile(samples["python -c pass"], 0.9),
            "-",
        ),
        ("hook command own time ms (vs goal)", own, GOAL_MS, "well under 100 ms"),
        ("hookcommand import ms (vs monitor.cli.app)", hook_ms, app_ms, "-"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="runs of each command")
    options = parser.parse_args()
    for figure, ours, baseline, goal in main(options.rounds):
        print(f"{figure:<48} {ours:>10.2f} {baseline:>10.2f}  {goal}")
