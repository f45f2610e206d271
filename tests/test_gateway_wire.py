"""The ExtMcp messages drift-monitor writes out are agentgateway's, field for field, and the gateway
config the docs show is one agentgateway's own schema accepts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from support.agentgateway import stubs, upstream_descriptor

from monitor.approvals import gatewaywire

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "tests" / "data" / "agentgateway" / "config.schema.json"


def test_descriptor_is_what_protoc_makes_of_agentgateways_file() -> None:
    assert gatewaywire.file_descriptor() == upstream_descriptor()


def test_messages_the_gateway_encodes_read_the_same_and_answers_decode_as_it_expects() -> None:
    pb2, _ = stubs()
    sent = pb2.McpRequest(
        service_names=["everything"],
        method="tools/call",
        mcp_request=b'{"name":"echo","arguments":{"message":"hi"}}',
        headers=[pb2.McpHeader(key="mcp-session-id", value=b"s-1")],
    )
    sent.metadata_context.fields["tenant"].string_value = "acme"
    read = gatewaywire.read_call(sent.SerializeToString())
    assert read.service_names == ("everything",)
    assert read.params == sent.mcp_request
    assert read.headers == (("mcp-session-id", b"s-1"),)
    assert gatewaywire.read_call(pb2.McpRequest(method="tools/list").SerializeToString()).params is None

    refused = pb2.McpRequestResult.FromString(gatewaywire.call_refused("no", b'{"a":1}'))
    assert refused.WhichOneof("result") == "error"
    assert refused.error.code == pb2.AuthorizationError.PERMISSION_DENIED
    assert (refused.error.reason, json.loads(refused.error.mcp_error)) == ("no", {"a": 1})
    assert not pb2.McpRequestResult.FromString(gatewaywire.call_refused("no")).error.HasField("mcp_error")
    assert pb2.McpRequestResult.FromString(gatewaywire.call_passes()).WhichOneof("result") == "pass"

    listing = pb2.McpResponse(service_names=["a", "b"], method="tools/list", mcp_response=b'{"tools":[]}')
    result = gatewaywire.read_result(listing.SerializeToString())
    assert (result.service_names, result.method, result.result) == (("a", "b"), "tools/list", b'{"tools":[]}')
    replaced = pb2.McpResponseResult.FromString(gatewaywire.result_replaced(b'{"tools":[]}'))
    assert replaced.mutated == b'{"tools":[]}'
    assert pb2.McpResponseResult.FromString(gatewaywire.result_passes()).WhichOneof("result") == "pass"
    assert pb2.McpResponseResult.FromString(gatewaywire.result_refused("x")).error.reason == "x"


def test_the_documented_gateway_config_is_valid_per_agentgateways_schema(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = text[text.index("## Gateways in front of MCP servers: agentgateway") :]
    match = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert match is not None
    documented = match.group(1)
    assert "failureMode: failClosed" in documented and "tools/call: request" in documented
    for name, config in {
        "documented": documented,
        "a failure mode agentgateway lacks": documented.replace("failClosed", "failShut"),
        "a phase agentgateway lacks": documented.replace("tools/call: request", "tools/call: before"),
    }.items():
        path = tmp_path / f"{name.replace(' ', '-')}.yaml"
        path.write_text(config, encoding="utf-8")
        result = subprocess.run(
            [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (result.returncode == 0) == (name == "documented"), (name, result.stdout, result.stderr)
