"""agentgateway's ExtMcp wire messages (docs/integrations.md, "agentgateway"), built at run time.

agentgateway asks an external MCP policy service over gRPC: the service `agentgateway.dev.ext_mcp.ExtMcp`
with `CheckRequest` (before a call reaches its server) and `CheckResponse` (with a server's result).
Its messages are declared in agentgateway's `crates/protos/proto/ext_mcp.proto` (Apache-2.0, the
agentgateway authors); `tests/data/agentgateway/ext_mcp.proto` is a copy of it, which the tests
compile with `protoc`: they compare this module's descriptor with it field by field, and call the
service with the messages it makes. The descriptor is written out here, not generated, so no
generated module needs to be kept in step with a compiler, and it lives in a pool of its own, so it
never collides with another copy of the same file in a process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2
from google.protobuf.message_factory import GetMessageClass

PACKAGE = "agentgateway.dev.ext_mcp"
SERVICE = f"{PACKAGE}.ExtMcp"
CHECK_REQUEST = "CheckRequest"
CHECK_RESPONSE = "CheckResponse"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BYTES, _MESSAGE, _ENUM = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE, _F.TYPE_ENUM
_REPEATED, _OPTIONAL = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
Field = tuple[str, int, "descriptor_pb2.FieldDescriptorProto.Type.ValueType", str, bool]
"""name, number, type, message or enum type (".pkg.Name"), repeated."""

_MESSAGES: dict[str, list[Field]] = {
    "McpRequest": [
        ("service_names", 1, _STRING, "", True),
        ("method", 2, _STRING, "", False),
        ("metadata_context", 3, _MESSAGE, ".google.protobuf.Struct", False),
        ("mcp_request", 4, _BYTES, "", False),  # proto3 `optional`
        ("headers", 5, _MESSAGE, f".{PACKAGE}.McpHeader", True),
    ],
    "McpResponse": [
        ("service_names", 1, _STRING, "", True),
        ("method", 2, _STRING, "", False),
        ("metadata_context", 3, _MESSAGE, ".google.protobuf.Struct", False),
        ("mcp_response", 4, _BYTES, "", False),
    ],
    "McpRequestResult": [
        ("pass", 1, _MESSAGE, f".{PACKAGE}.Pass", False),
        ("mutated", 2, _BYTES, "", False),
        ("error", 3, _MESSAGE, f".{PACKAGE}.AuthorizationError", False),
        ("header_mutation", 4, _MESSAGE, f".{PACKAGE}.HeaderMutation", False),
        ("metadata", 5, _MESSAGE, ".google.protobuf.Struct", False),
    ],
    "McpResponseResult": [
        ("pass", 1, _MESSAGE, f".{PACKAGE}.Pass", False),
        ("mutated", 2, _BYTES, "", False),
        ("error", 3, _MESSAGE, f".{PACKAGE}.AuthorizationError", False),
    ],
    "HeaderMutation": [
        ("set", 1, _MESSAGE, f".{PACKAGE}.McpHeader", True),
        ("remove", 2, _STRING, "", True),
    ],
    "McpHeader": [("key", 1, _STRING, "", False), ("value", 2, _BYTES, "", False)],
    "Pass": [],
    "AuthorizationError": [
        ("code", 1, _ENUM, f".{PACKAGE}.AuthorizationError.Code", False),
        ("reason", 2, _STRING, "", False),
        ("mcp_error", 3, _BYTES, "", False),  # proto3 `optional`
    ],
}
_ONEOF_RESULT = {"McpRequestResult": 3, "McpResponseResult": 3}
"""Messages whose first n fields are the `oneof result`."""
_PROTO3_OPTIONAL = {("McpRequest", "mcp_request"), ("AuthorizationError", "mcp_error")}
CODES = ("UNKNOWN", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "INVALID")
"""`AuthorizationError.Code`, in number order."""


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """`ext_mcp.proto` as `protoc` describes it (the test compares the two)."""
    file = descriptor_pb2.FileDescriptorProto(
        name="ext_mcp.proto",
        package=PACKAGE,
        dependency=["google/protobuf/struct.proto"],
        syntax="proto3",
    )
    file.options.go_package = "github.com/agentgateway/agentgateway/go/api;api"
    for name, fields in _MESSAGES.items():
        message = file.message_type.add(name=name)
        oneof_fields = _ONEOF_RESULT.get(name, 0)
        if oneof_fields:
            message.oneof_decl.add(name="result")
        for index, (field_name, number, kind, type_name, repeated) in enumerate(fields):
            json_name = "".join(
                part.capitalize() if i else part for i, part in enumerate(field_name.split("_"))
            )
            field = message.field.add(
                name=field_name,
                number=number,
                type=kind,
                label=_REPEATED if repeated else _OPTIONAL,
                json_name=json_name,
            )
            if type_name:
                field.type_name = type_name
            if index < oneof_fields:
                field.oneof_index = 0
            elif (name, field_name) in _PROTO3_OPTIONAL:
                field.proto3_optional = True
                field.oneof_index = len(message.oneof_decl)
                message.oneof_decl.add(name=f"_{field_name}")
        if name == "AuthorizationError":
            code = message.enum_type.add(name="Code")
            for number, value in enumerate(CODES):
                code.value.add(name=value, number=number)
    service = file.service.add(name="ExtMcp")
    service.method.add(
        name=CHECK_REQUEST, input_type=f".{PACKAGE}.McpRequest", output_type=f".{PACKAGE}.McpRequestResult"
    )
    service.method.add(
        name=CHECK_RESPONSE,
        input_type=f".{PACKAGE}.McpResponse",
        output_type=f".{PACKAGE}.McpResponseResult",
    )
    return file


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    struct = descriptor_pb2.FileDescriptorProto()
    struct_pb2.DESCRIPTOR.CopyToProto(struct)
    pool.Add(struct)
    pool.Add(file_descriptor())
    return pool


POOL = _pool()


def _message(name: str) -> Any:
    """A message class of the pool (its fields are known only at run time, hence `Any`, kept in here)."""
    return GetMessageClass(POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


_McpRequest = _message("McpRequest")
_McpResponse = _message("McpResponse")
_McpRequestResult = _message("McpRequestResult")
_McpResponseResult = _message("McpResponseResult")
_AuthorizationError = _message("AuthorizationError")
_Pass = _message("Pass")
PERMISSION_DENIED = CODES.index("PERMISSION_DENIED")


@dataclass(frozen=True)
class CallCheck:
    """An `McpRequest`: before `method` reaches the backends `service_names`."""

    service_names: tuple[str, ...]
    method: str
    params: bytes | None
    """The JSON-RPC `params`, raw; None when the call has none."""
    headers: tuple[tuple[str, bytes], ...]
    """The client's HTTP request headers the gateway forwards (`requestHeaders`)."""


@dataclass(frozen=True)
class ResultCheck:
    """An `McpResponse`: a backend's (or the merged) JSON-RPC `result` of `method`, raw."""

    service_names: tuple[str, ...]
    method: str
    result: bytes


def read_call(body: bytes) -> CallCheck:
    """Raises `DecodeError` for bytes that are no `McpRequest`."""
    message = _McpRequest.FromString(body)
    return CallCheck(
        service_names=tuple(message.service_names),
        method=message.method,
        params=message.mcp_request if message.HasField("mcp_request") else None,
        headers=tuple((header.key, header.value) for header in message.headers),
    )


def read_result(body: bytes) -> ResultCheck:
    """Raises `DecodeError` for bytes that are no `McpResponse`."""
    message = _McpResponse.FromString(body)
    return ResultCheck(tuple(message.service_names), message.method, message.mcp_response)


def _error(reason: str, data: bytes | None) -> Any:
    error = _AuthorizationError(code=PERMISSION_DENIED, reason=reason)
    if data is not None:
        error.mcp_error = data
    return error


def call_passes() -> bytes:
    """An `McpRequestResult` that lets the call go on (to the gateway's own authorization)."""
    return bytes(_McpRequestResult(**{"pass": _Pass()}).SerializeToString())


def call_refused(reason: str, data: bytes | None = None) -> bytes:
    """An `McpRequestResult` refusing the call: the client gets JSON-RPC error -32001 with `reason`
    as its message and `data` (JSON) as its data."""
    return bytes(_McpRequestResult(error=_error(reason, data)).SerializeToString())


def result_passes() -> bytes:
    return bytes(_McpResponseResult(**{"pass": _Pass()}).SerializeToString())


def result_replaced(result: bytes) -> bytes:
    """An `McpResponseResult` replacing the JSON-RPC `result` with `result` (JSON)."""
    return bytes(_McpResponseResult(mutated=result).SerializeToString())


def result_refused(reason: str) -> bytes:
    return bytes(_McpResponseResult(error=_error(reason, None)).SerializeToString())
