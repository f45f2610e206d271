"""agentgateway's guardrail calls as the gateway sees them, next to the HTTP decision API.

Goal (issue 27, item 6): a `CheckRequest` over gRPC answered within 2x of `POST /api/v1/decisions`
asked of the same process in the same run, so putting drift-monitor in front of every `tools/call`
costs the gateway no more than a host hook does.

`drift-monitor serve` runs as deployed (a subprocess, `[decisions] agentgateway_listen` on
loopback, a SQLite file), polling the project's FastMCP test server over Streamable HTTP, whose
listing has 20 tools (one not read-only). This process is the gateway: one gRPC channel (as
agentgateway keeps one per processor) and one kept-alive HTTP connection, round-robin in a shuffled
order, one request at a time (closed loop: each timed from send to answer):

- `CheckRequest` for an approved tool (`Pass`), with agentgateway's own messages (`protoc` of its
  `ext_mcp.proto`) and its metadata (`authorization: Bearer`);
- `CheckResponse` for the 20-tool `tools/list` result, one tool of which the monitor refuses
  (`mutated`, the listing without it);
- `POST /api/v1/decisions` for the same approved tool (the baseline), and `GET /healthz`.

    python bench/bench_gateway.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import common
import httpx
from support import WAIT, http_server, migrate_config, serving, tool, wait_until
from support.agentgateway import Gateway

TOKEN = "bench-gateway-token-0123456789"
ROUNDS = 2000


def listing(writing: int | None = None) -> list[dict[str, object]]:
    """20 read-only tools, but `tool_<writing>`, which is not."""
    return [tool(f"tool_{n:02d}", description=f"Tool {n}.", read_only=n != writing) for n in range(20)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _timed(call: Callable[[], bool]) -> float:
    start = time.perf_counter()
    assert call(), "a wrong answer"
    return (time.perf_counter() - start) * 1000


def main(rounds: int = ROUNDS) -> list[tuple[str, float, float, str]]:
    env = {**os.environ, "BENCH_GATEWAY_TOKEN": TOKEN}
    port = _free_port()
    with tempfile.TemporaryDirectory() as folder:
        tools_file = Path(folder) / "tools.json"
        tools_file.write_text(json.dumps(listing()))
        with http_server("fastmcp_server.py", str(tools_file)) as mcp_url:
            config = Path(folder) / "monitor.toml"
            config.write_text(
                f'[monitor]\ndatabase_url = "sqlite:///{folder}/bench.db"\npoll_interval = "60s"\n'
                'api_token_env = "BENCH_GATEWAY_TOKEN"\n\n'
                f'[decisions]\nagentgateway_listen = "127.0.0.1:{port}"\n\n'
                f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n'
            )
            migrate_config(config, env)
            with serving(config, env) as running:
                headers = {"Authorization": f"Bearer {TOKEN}"}
                http = httpx.Client(base_url=running.url, headers=headers, timeout=30)

                def version() -> int:
                    current = http.get("/api/v1/servers/tenants").json().get("current") or {}
                    return int(current.get("version") or 0)

                wait_until("the first poll", lambda: version() == 1, timeout=WAIT, alive=[running])
                tools_file.write_text(json.dumps(listing(writing=7)))  # tofu trusted it read-only: a deny
                assert http.post("/api/v1/servers/tenants/poll").status_code == 200
                wait_until("the change", lambda: version() == 2, timeout=WAIT, alive=[running])
                gateway = Gateway(port, TOKEN)
                names = [f"tool_{n:02d}" for n in range(20)]
                calls: dict[str, Callable[[], bool]] = {
                    "CheckRequest (gRPC)": lambda: (
                        gateway.call("tenants", "tool_01").WhichOneof("result") == "pass"
                    ),
                    "CheckResponse, 20 tools (gRPC)": lambda: (
                        len(json.loads(gateway.listing(["tenants"], names).mutated)["tools"]) == 19
                    ),
                    "POST /api/v1/decisions": lambda: (
                        http.post("/api/v1/decisions", json={"server": "tenants", "tool": "tool_01"}).json()[
                            "decision"
                        ]
                        == "allow"
                    ),
                    "GET /healthz": lambda: http.get("/healthz").status_code == 200,
                }
                for call in calls.values():
                    for _ in range(50):
                        _timed(call)  # connections open, views built
                samples: dict[str, list[float]] = {label: [] for label in calls}
                load = os.getloadavg()[0]
                rng = random.Random(27)
                for _ in range(rounds):
                    order = list(calls)
                    rng.shuffle(order)
                    for label in order:
                        samples[label].append(_timed(calls[label]))
                gateway.channel.close()
                http.close()
    print(f"{rounds} rounds, one request at a time (load average {load:.1f} -> {os.getloadavg()[0]:.1f}):")
    for label, values in samples.items():
        print(
            f"  {label:<34} p50 {common.quantile(values, 0.5):6.2f} ms"
            f"  p99 {common.quantile(values, 0.99):6.2f} ms"
        )
    ours = common.quantile(samples["CheckRequest (gRPC)"], 0.5)
    baseline = common.quantile(samples["POST /api/v1/decisions"], 0.5)
    return [("agentgateway CheckRequest p50 (ms)", ours, baseline, "within 2x of the decision API")]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    main(parser.parse_args().rounds)
