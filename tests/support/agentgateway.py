"""agentgateway's side of its ExtMcp calls: the messages and stub `protoc` makes of its own
`ext_mcp.proto` (tests/data/agentgateway), so a test calls drift-monitor with exactly what the
gateway sends, independently of the descriptor drift-monitor writes out itself."""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import grpc
from fastapi import FastAPI
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from monitor.approvals.gateway import GatewayAdapter, GatewayServer

PROTO = Path(__file__).resolve().parent.parent / "data" / "agentgateway" / "ext_mcp.proto"
_OUT = Path(tempfile.mkdtemp(prefix="ext-mcp-stubs-"))


def _well_known() -> str:
    return str(Path(protoc.__file__).resolve().parent / "_proto")


def _compile(*outputs: str) -> None:
    status = protoc.main(["protoc", f"-I{PROTO.parent}", f"-I{_well_known()}", *outputs, PROTO.name])
    assert status == 0, f"protoc failed on {PROTO}"


def upstream_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """What `protoc` makes of agentgateway's file (no source info)."""
    out = _OUT / "ext_mcp.binpb"
    _compile(f"--descriptor_set_out={out}")
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (found,) = [file for file in files.file if file.name == "ext_mcp.proto"]
    return found


@cache
def stubs() -> tuple[ModuleType, ModuleType]:
    """`ext_mcp_pb2` (the messages) and `ext_mcp_pb2_grpc` (the `ExtMcpStub` client), generated now."""
    _compile(f"--python_out={_OUT}", f"--grpc_python_out={_OUT}")
    sys.path.insert(0, str(_OUT))
    try:
        return importlib.import_module("ext_mcp_pb2"), importlib.import_module("ext_mcp_pb2_grpc")
    finally:
        sys.path.remove(str(_OUT))


class Gateway:
    """agentgateway's side of the calls: its ExtMcp client on a real gRPC channel over loopback,
    sending what it sends (`crates/agentgateway/src/mcp/guardrails/client.rs`): the backend's name,
    the method, the JSON-RPC params or result as raw JSON, the client's headers, and the token as
    the `authorization` metadata its `backendAuth` policy adds."""

    def __init__(self, port: int, token: str | None) -> None:
        pb2, services = stubs()
        self.pb2 = pb2
        self.port = port
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = services.ExtMcpStub(self.channel)
        self.token = token

    def _metadata(self, token: str | Literal["default"] | None) -> list[tuple[str, str]]:
        token = self.token if token == "default" else token
        return [("authorization", f"Bearer {token}")] if token is not None else []

    def call(
        self,
        backend: str | list[str],
        tool: str | None,
        *,
        params: bytes | None = None,
        method: str = "tools/call",
        token: str | Literal["default"] | None = "default",
        session: str | None = "agw-session-1",
    ) -> Any:
        """`CheckRequest` for a `tools/call` of `tool` on `backend`; the `McpRequestResult`."""
        if params is None and tool is not None:
            params = json.dumps({"name": tool, "arguments": {"q": "42"}}).encode()
        headers = [self.pb2.McpHeader(key=":authority", value=b"gateway.local")]
        if session is not None:
            headers.append(self.pb2.McpHeader(key="mcp-session-id", value=session.encode()))
        request = self.pb2.McpRequest(
            service_names=[backend] if isinstance(backend, str) else backend,
            method=method,
            headers=headers,
        )
        if params is not None:
            request.mcp_request = params
        return self.stub.CheckRequest(request, metadata=self._metadata(token), timeout=30)

    def listing(
        self,
        backends: list[str],
        tools: list[str] | bytes,
        *,
        token: str | Literal["default"] | None = "default",
    ) -> Any:
        """`CheckResponse` for a `tools/list` result naming `tools` (or raw `result` bytes)."""
        result = (
            tools
            if isinstance(tools, bytes)
            else json.dumps(
                {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in tools]}
            ).encode()
        )
        response = self.pb2.McpResponse(service_names=backends, method="tools/list", mcp_response=result)
        return self.stub.CheckResponse(response, metadata=self._metadata(token), timeout=30)

    def raw(self, rpc: str, body: bytes, token: str | Literal["default"] | None = "default") -> bytes:
        """Any bytes as a call's message, as a broken or hostile client would send them."""
        method = self.channel.unary_unary(
            f"/agentgateway.dev.ext_mcp.ExtMcp/{rpc}",
            request_serializer=lambda raw: raw,
            response_deserializer=lambda raw: raw,
        )
        answer: bytes = method(body, metadata=self._metadata(token), timeout=30)
        return answer


@contextmanager
def serving_gateway(app: FastAPI, token: str | None) -> Iterator[Gateway]:
    """The adapter of `app` (its decision point and identity) on a loopback port, and a client."""
    adapter = GatewayAdapter(app.state.decision_point, app.state.web.identity)
    server = GatewayServer(adapter, "127.0.0.1:0", max_message_bytes=1 << 20)
    server.start()
    gateway = Gateway(server.port, token)
    try:
        yield gateway
    finally:
        gateway.channel.close()
        server.stop(grace=5)
