"""agentgateway's MCP guardrails (`mcpGuardrails`): the decision point as an ExtMcp policy service.

agentgateway asks a `remote` processor over gRPC (`monitor.approvals.gatewaywire`) before a
`tools/call` reaches its server (`CheckRequest`) and with each `tools/list` result (`CheckResponse`);
docs/integrations.md has the gateway's config and the sources this follows. The adapter answers in
the gateway's own terms and never widens what the gateway allows on its own:

- A `tools/call` passes only when the decision is `allow` (a pass hands the call on to the gateway's
  own authorization, which still applies); agentgateway has no prompt, so `ask` is refused until a
  person approves the tool, and a server the monitor does not know passes only under
  `[decisions] unmonitored = "none"`. A refusal is an `AuthorizationError` (`PERMISSION_DENIED`),
  which the client receives as a JSON-RPC error with the reason; its data holds the decision.
- A `tools/list` result loses the tools that would not pass (so a client is not offered them); a
  listing that loses none passes unchanged. The names a gateway shows may carry its target's name
  (`<target>_<tool>` when it multiplexes): a tool is kept only when every reading of its name that
  the monitor's listing holds passes, and dropped when no reading does.
- Every failure is answered, never raised: a caller without a token of role `decide`, a message
  that cannot be read, a call naming no tool or several backends, and an error while deciding are
  each an `AuthorizationError`, because a gRPC error passes the call when the gateway is configured
  `failureMode: failOpen`. What the adapter cannot answer (the monitor down, the gateway's deadline
  passed) is the gateway's failure mode: docs/security.md says to keep `failClosed`, its default.

Calls on methods other than `tools/call` (request side) and `tools/list` (response side) pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError
from sqlalchemy.exc import SQLAlchemyError

from monitor.approvals import gatewaywire as wire
from monitor.approvals.hosts.base import host_reason
from monitor.approvals.inputs import Unreadable, read_object
from monitor.approvals.names import exact_name
from monitor.approvals.point import Answer, DecisionPoint, Unmonitored
from monitor.core.ijson import storable
from monitor.core.roles import Caller, Via
from monitor.core.states import DecisionKind
from monitor.identity.callers import Identity, decide_refusal
from monitor.store.db import GATEWAY_THREADS

log = logging.getLogger(__name__)
HOST = "agentgateway"
SESSION_HEADER = "mcp-session-id"
TOOLS_CALL = "tools/call"
TOOLS_LIST = "tools/list"
Refusal = str
"""Why a call or a listing is refused, in words for the person behind the MCP client."""


@dataclass(frozen=True)
class GrpcCaller:
    """Who sent a gRPC call: its bearer token (gRPC metadata `authorization`) and its address."""

    token: str | None
    source: str


class GatewayAdapter:
    """The answers to agentgateway's two calls, from one `DecisionPoint` (the web app's)."""

    def __init__(self, point: DecisionPoint, identity: Identity) -> None:
        self.point = point
        self.identity = identity

    # --- who asks ----------------------------------------------------------------------------------

    def refusal(self, caller: GrpcCaller, rpc: str) -> Refusal | None:
        """Why this caller may not ask (None: it may); a token the database could not check is refused."""
        try:
            found = self.identity.identify_token(caller.token, caller.source)
        except SQLAlchemyError as exc:
            log.warning("could not identify an agentgateway call: the database failed: %s", exc)
            found = Caller("unverified", None, Via.UNVERIFIED, caller.source)
        return decide_refusal(self.identity, found, f"gRPC {wire.SERVICE}/{rpc}")

    # --- before a call -----------------------------------------------------------------------------

    def check_request(self, body: bytes, caller: GrpcCaller) -> bytes:
        """`CheckRequest`: pass, or an `AuthorizationError` saying why not."""
        try:
            refused = self.refusal(caller, wire.CHECK_REQUEST)
            verdict = refused if refused is not None else self._call_verdict(body)
        except Exception:
            log.exception("an agentgateway decision failed: answered deny")
            verdict = "the monitor failed while deciding (see its log)"
        if verdict is None:
            return wire.call_passes()
        if isinstance(verdict, str):
            return wire.call_refused(host_reason(verdict))
        data = json.dumps({"drift-monitor": verdict.to_dict()}).encode()
        return wire.call_refused(host_reason(_call_reason(verdict)), data)

    def _call_verdict(self, body: bytes) -> Refusal | Answer | None:
        """None when the call passes; else why not (an `Answer` when the decision refused it)."""
        try:
            request = wire.read_call(body)
        except DecodeError:
            return "the gateway's request could not be read (not an ExtMcp McpRequest)"
        if request.method != TOOLS_CALL:
            return None
        if len(request.service_names) != 1:
            return f"a tools/call names exactly one backend; this one names {len(request.service_names)}"
        server = request.service_names[0]
        if request.params is None:
            return "the tools/call has no params"
        try:
            params = read_object(request.params)
        except Unreadable as exc:
            return f"the tools/call params cannot be read: {exc}"
        tool = params.get("name")
        if not isinstance(tool, str) or not tool or not storable(tool) or not storable(server):
            return "the tools/call names no tool, or a name no server or tool can have"
        found = self.point.decide_for_named_host(
            HOST,
            server,
            tool,
            normalise=exact_name,
            session_id=_session_id(request.headers),
            client=HOST,
        )
        if isinstance(found, Unmonitored):
            setting = self.point.config.decisions.unmonitored
            if setting == "none":
                return None
            return f"no monitored server is named {server!r} ([decisions] unmonitored = {setting!r})"
        decision = found.verdict.decision
        if decision == DecisionKind.ALLOW:
            return None
        return found

    # --- with a listing ----------------------------------------------------------------------------

    def check_response(self, body: bytes, caller: GrpcCaller) -> bytes:
        """`CheckResponse`: pass, the `tools/list` result without the tools that would not pass, or an
        `AuthorizationError` when the result cannot be judged."""
        try:
            refused = self.refusal(caller, wire.CHECK_RESPONSE)
            outcome = refused if refused is not None else self._listing(body)
        except Exception:
            log.exception("filtering a tools/list for agentgateway failed: answered an error")
            outcome = "the monitor failed while filtering the listing (see its log)"
        if outcome is None:
            return wire.result_passes()
        if isinstance(outcome, bytes):
            return wire.result_replaced(outcome)
        return wire.result_refused(host_reason(outcome))

    def _listing(self, body: bytes) -> Refusal | bytes | None:
        """None: pass unchanged; bytes: the result with fewer tools; a string: why it is refused."""
        try:
            response = wire.read_result(body)
        except DecodeError:
            return "the gateway's response could not be read (not an ExtMcp McpResponse)"
        if response.method != TOOLS_LIST:
            return None
        try:
            result = json.loads(response.result)
        except (ValueError, RecursionError):
            return "the tools/list result is not JSON the monitor can read"
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list) or not all(
            isinstance(tool, dict) and isinstance(tool.get("name"), str) for tool in tools
        ):
            return "the tools/list result has no list of named tools"
        if not all(storable(service) for service in response.service_names):
            return "a backend's name holds characters no server name can have"
        listings = {
            service: self.point.listed_for_named_host(service, normalise=exact_name)
            for service in response.service_names
        }
        kept = [tool for tool in tools if self._offered(tool["name"], listings)]
        if len(kept) == len(tools):
            return None
        return json.dumps({**result, "tools": kept}, separators=(",", ":")).encode()

    def _offered(self, name: str, listings: Mapping[str, dict[str, DecisionKind] | Unmonitored]) -> bool:
        """Whether a tool a gateway lists as `name` would pass a call: each reading of the name (the
        tool of any backend, or `<backend>_<tool>`) that the monitor's listings hold must pass, and
        one at least must be held."""
        readings = [(service, name) for service in listings]
        readings += [(s, name[len(s) + 1 :]) for s in listings if name.startswith(f"{s}_")]
        held = [self._held(listings[service], tool) for service, tool in readings]
        known = [decision for decision in held if decision is not None]
        return bool(known) and all(decision == DecisionKind.ALLOW for decision in known)

    def _held(self, listing: dict[str, DecisionKind] | Unmonitored, tool: str) -> DecisionKind | None:
        """The decision a listing holds for `tool` (None: not in it); for an unmonitored backend,
        `allow` under `unmonitored = "none"` (the gateway decides alone), else nothing is held."""
        if isinstance(listing, Unmonitored):
            return DecisionKind.ALLOW if self.point.config.decisions.unmonitored == "none" else None
        return listing.get(tool)


def _call_reason(answer: Answer) -> str:
    verdict = answer.verdict
    if verdict.decision == DecisionKind.ASK:
        return f"a person must approve this tool first (agentgateway has no prompt): {verdict.reason}"
    return verdict.reason


def _session_id(headers: Sequence[tuple[str, bytes]]) -> str | None:
    for key, raw in headers:
        if key.lower() == SESSION_HEADER:
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
            return value if 0 < len(value) <= 200 and storable(value) else None
    return None


# --- the gRPC service --------------------------------------------------------------------------------


def _caller(context: grpc.ServicerContext) -> GrpcCaller:
    token = None
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, given = value.partition(" ")
            token = given.strip() or None if scheme.lower() == "bearer" else None
    peer = context.peer() or "unknown"
    address = peer.split(":", 1)[1] if ":" in peer else peer
    return GrpcCaller(token, address.rsplit(":", 1)[0].strip("[]"))


Answerer = Callable[[bytes, GrpcCaller], bytes]


def _handler(answer: Answerer) -> grpc.RpcMethodHandler[bytes, bytes]:
    """Raw bytes in and out, so a message that cannot be parsed is answered (a deny), not a gRPC error."""

    def handle(body: bytes, context: grpc.ServicerContext) -> bytes:
        return answer(body, _caller(context))

    return grpc.unary_unary_rpc_method_handler(handle)


class GatewayServer:
    """The ExtMcp service on its own port (cleartext HTTP/2, as agentgateway's `host:` dials it)."""

    def __init__(
        self, adapter: GatewayAdapter, listen: str, *, max_message_bytes: int, workers: int = GATEWAY_THREADS
    ):
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agentgateway"),
            handlers=[
                grpc.method_handlers_generic_handler(
                    wire.SERVICE,
                    {
                        wire.CHECK_REQUEST: _handler(adapter.check_request),
                        wire.CHECK_RESPONSE: _handler(adapter.check_response),
                    },
                )
            ],
            options=[
                ("grpc.so_reuseport", 0),  # a port in use is an error, not shared with another process
                ("grpc.max_receive_message_length", max_message_bytes),
            ],
            maximum_concurrent_rpcs=workers * 16,
        )
        try:
            self.port = self.server.add_insecure_port(listen)
        except RuntimeError:
            self.port = 0
        if not self.port:
            raise OSError(
                f"cannot listen on {listen} for agentgateway (taken, or not this machine's address)"
            )
        self.listen = listen

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float) -> None:
        """Stop taking calls and wait up to `grace` seconds for those under way."""
        self.server.stop(grace).wait()
