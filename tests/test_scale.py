"""Two `serve` processes on one PostgreSQL database share 50 servers: one poll per server per interval."""

from __future__ import annotations

import itertools
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from test_service import Service, migrate

FLEET = Path(__file__).resolve().parent.parent / "bench" / "fleet_server.py"
SERVERS = 50
INTERVAL = 3.0
RUN_FOR = 13.0


@contextmanager
def fleet(count: int) -> Iterator[list[str]]:
    """The benchmark's fleet: `count` MCPServer apps on their own 127.0.0.1 ports in one process."""
    process = subprocess.Popen(
        [sys.executable, str(FLEET), "--servers", str(count), "--tools", "5"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=60)
            if line is None:
                raise RuntimeError("fleet exited before it was ready")
            if line.startswith("READY "):
                yield line.split()[1:]
                return
    finally:
        process.kill()
        process.wait()


def test_two_instances_poll_each_server_once_per_interval(tmp_path: Path, database_url: str) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("several instances share work only on PostgreSQL")
    with fleet(SERVERS) as urls:
        servers = "".join(
            f'[[servers]]\nname = "s{i:02d}"\ntransport = "http"\nurl = "{url}"\n\n'
            for i, url in enumerate(urls)
        )
        config = tmp_path / "monitor.toml"
        config.write_text(
            f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "{INTERVAL}s"\n'
            f'poll_timeout = "10s"\n\n{servers}'
        )
        env = dict(os.environ)
        migrate(config, env)
        instances = [Service(config, env), Service(config, env)]
        try:
            started = time.monotonic()
            deadline = started + RUN_FOR
            while time.monotonic() < deadline:
                assert all(i.process.poll() is None for i in instances), instances[0].output()[-3000:]
                time.sleep(0.5)  # the run itself is the measurement: two processes polling for 13 s
        finally:
            codes = [instance.stop() for instance in instances]
        assert codes == [0, 0], [i.output()[-2000:] for i in instances]

    engine = create_engine(database_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "select s.name, a.started_at, a.ok from poll_attempts a join servers s on s.id = a.server_id "
                "order by s.name, a.started_at"
            )
        ).all()
    engine.dispose()
    by_server: dict[str, list[datetime]] = {}
    for name, started_at, ok in rows:
        assert ok, f"{name} failed a poll"
        by_server.setdefault(name, []).append(started_at)
    assert len(by_server) == SERVERS
    counts = sorted(len(times) for times in by_server.values())
    assert counts[0] >= RUN_FOR / INTERVAL - 1, counts
    gaps = [
        (later - earlier).total_seconds()
        for times in by_server.values()
        for earlier, later in itertools.pairwise(times)
    ]
    # Exactly one poll per interval: never two within one (claims land on one-second ticks, so up to
    # a tick late), and none skipped.
    assert min(gaps) >= INTERVAL - 1.1 and max(gaps) <= INTERVAL + 1.1, (sorted(gaps)[:3], sorted(gaps)[-3:])
    ports = [
        {m for m in re.findall(r"POST http://127\.0\.0\.1:(\d+)/mcp", instance.output())}
        for instance in instances
    ]
    assert ports[0] and ports[1], "both instances did part of the work"
    print(
        f"polls per server over {RUN_FOR:.0f} s at {INTERVAL:.0f} s: {counts[0]}..{counts[-1]}; "
        f"smallest gap {min(gaps):.2f} s; servers polled by each instance: {len(ports[0])}, {len(ports[1])}"
    )
