"""`drift-monitor serve` answering agentgateway's MCP guardrails on the port `[decisions]
agentgateway_listen` names: a real service process, a real MCP server, and the gateway's own ExtMcp
client over loopback."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import httpx
import pytest
from support import WAIT, free_port, http_server, migrate_config, read_only_flip, run_cli, serving, wait_until
from support.agentgateway import Gateway

pytestmark = pytest.mark.usefixtures("no_leaked_processes")

TOKEN = "gateway-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def write_config(tmp_path: Path, database_url: str, servers: str, listen: str) -> Path:
    config = tmp_path / "monitor.toml"
    config.write_text(
        f'[monitor]\ndatabase_url = "{database_url}"\npoll_interval = "1s"\npoll_timeout = "10s"\n'
        'api_token_env = "TEST_GATEWAY_TOKEN"\n\n'
        f'[decisions]\nagentgateway_listen = "{listen}"\nunmonitored = "deny"\n\n{servers}\n'
    )
    return config


@pytest.mark.slow
def test_serve_answers_the_gateway_before_each_call_and_with_each_listing(
    tmp_path: Path, database_url: str
) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(read_only_flip(True)))
    env = {**os.environ, "TEST_GATEWAY_TOKEN": TOKEN}
    port = free_port()
    with http_server("fastmcp_server.py", str(tools_file)) as mcp_url:
        servers = f'[[servers]]\nname = "tenants"\ntransport = "http"\nurl = "{mcp_url}"\n'
        config = write_config(tmp_path, database_url, servers, f"127.0.0.1:{port}")
        migrate_config(config, env)
        with serving(config, env) as running:

            def version() -> int:
                answer = httpx.get(f"{running.url}/api/v1/servers/tenants", headers=AUTH, timeout=30)
                current = answer.json().get("current") or {}
                return int(current.get("version") or 0)

            wait_until("the first poll", lambda: version() >= 1, timeout=WAIT, alive=[running])
            gateway = Gateway(port, TOKEN)
            try:
                assert gateway.call("tenants", "purge_tenant").WhichOneof("result") == "pass"
                assert gateway.listing(["tenants"], ["purge_tenant", "lookup"]).WhichOneof("result") == "pass"
                refused = gateway.call("elsewhere", "purge_tenant")
                assert "no monitored server" in refused.error.reason
                assert "sent no token" in gateway.call("tenants", "lookup", token=None).error.reason

                tools_file.write_text(json.dumps(read_only_flip(False)))
                wait_until("the change", lambda: version() >= 2, timeout=WAIT, alive=[running])
                denied = gateway.call("tenants", "purge_tenant")
                assert denied.WhichOneof("result") == "error"
                assert "read-only-revoked" in denied.error.reason
                assert gateway.call("tenants", "lookup").WhichOneof("result") == "pass"
                kept = gateway.listing(["tenants"], ["purge_tenant", "lookup"])
                assert [tool["name"] for tool in json.loads(kept.mutated)["tools"]] == ["lookup"]
            finally:
                gateway.channel.close()
            assert running.stop() == 0
        assert "answering agentgateway's MCP guardrails (ExtMcp gRPC) on 127.0.0.1:" in running.output()


def test_serve_refuses_to_start_on_a_gateway_port_in_use(tmp_path: Path, database_url: str) -> None:
    env = {**os.environ, "TEST_GATEWAY_TOKEN": TOKEN}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = write_config(tmp_path, database_url, "", f"127.0.0.1:{port}")
        migrate_config(config, env)
        result = run_cli("serve", "--config", str(config), "--port", "0", env=env)
    assert result.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port} for agentgateway" in result.stderr, result.stderr
