"""monitor.collect.client against real servers: the SDK's MCPServer, a third-party one, and hostile ones."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types
import pytest
from mcp.client import ClientSession, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from support import http_server, server_command, tool

from monitor.collect.client import FetchedListing, Limits, PollError, Target, fetch_listing

TIMEOUT = 1.5
LIMITS = Limits(timeout=10.0)
"""Generous for the happy paths: a cold interpreter importing the SDK takes about a second."""
HOSTILE_LIMITS = Limits(timeout=TIMEOUT, max_pages=10, max_bytes=1_000_000)
HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
SECRET = "Bearer s3cret-token-0123456789"

TOOLS: list[dict[str, Any]] = [
    tool(
        "read_file",
        title="Read a file",
        description="Reads a file. «ünïcode» ✓",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        annotations={"readOnlyHint": True, "openWorldHint": False, "x-audience": "internal"},
        **{"x-vendor": {"team": "storage", "weights": [1, 2.5, None]}, "_meta": {"com.example/revision": 7}},
    ),
    tool(
        "delete_file",
        annotations={"destructiveHint": True, "futureHint": {"nested": None}},
        **{"x-vendor": {"team": "storage"}},
    ),
    tool("search", description="", outputSchema={"type": "object"}),
    tool("ping", icons=[{"src": "data:,", "mimeType": "image/png"}]),
    tool("zeta", input_schema={"type": "object", "additionalProperties": False}, **{"x-empty": {}}),
]
"""Five tools, so a page size of 2 spreads them over three pages."""


pytestmark = pytest.mark.usefixtures("no_leaked_processes")
"""Every test leaves no new child process behind, and no zombie at all."""


@pytest.fixture(scope="module")
def tools_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tools") / "tools.json"
    path.write_text(json.dumps(TOOLS), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fastmcp_http(tools_file: Path) -> Iterator[str]:
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "2") as url:
        yield url


@pytest.fixture
def hostile_http() -> Iterator[Callable[..., str]]:
    """Starts hostile HTTP servers on demand; all are stopped when the test ends."""
    with ExitStack() as stack:
        yield lambda *args: stack.enter_context(http_server("hostile_server.py", *args))


def stdio_target(
    script: str, *args: str, era: Any = "handshake", env: dict[str, str] | None = None
) -> Target:
    command, *argv = server_command(script, *args)
    return Target(name=script, transport="stdio", command=command, args=argv, era=era, env=env)


def http_target(url: str, era: Any = "handshake", headers: dict[str, str] | None = None) -> Target:
    return Target(name="http", transport="http", url=url, era=era, headers=headers or {})


def assert_exact(listing: FetchedListing, tools: list[dict[str, Any]], pages: int) -> None:
    assert listing.tools == tools
    # Same keys in the same order with the same JSON types: nothing dropped, added or coerced.
    assert json.dumps(listing.tools) == json.dumps(tools)
    assert listing.pages == pages
    assert listing.listing_bytes > len(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))


NO_HANG = 300.0
"""Only so that a poll whose deadline failed ends the test instead of hanging it: no bound on speed."""


async def poll_error(target: Target, limits: Limits = HOSTILE_LIMITS) -> PollError:
    """The one error a poll of `target` ends with (the poll's own deadline ends a hanging server)."""
    with pytest.raises(PollError) as caught, anyio.fail_after(NO_HANG):
        await fetch_listing(target, limits)
    return caught.value


# --- MCPServer: pages joined, raw JSON kept, both eras ---------------------------------------------


@pytest.mark.parametrize(("era", "version"), [("handshake", HANDSHAKE), ("modern", MODERN)])
async def test_stdio_listing_is_every_page_exactly_as_sent(tools_file: Path, era: str, version: str) -> None:
    target = stdio_target("fastmcp_server.py", str(tools_file), "--page-size", "2", era=era)
    listing = await fetch_listing(target, LIMITS)
    assert_exact(listing, TOOLS, pages=3)
    assert (listing.era, listing.protocol_version) == (era, version)
    assert listing.server_info == {"name": "drift-test-server", "version": "1.0.0"}
    assert listing.capabilities["tools"] == {"listChanged": False}
    assert not listing.list_changed_advertised
    assert listing.elapsed_ms > 0


@pytest.mark.parametrize(("era", "version"), [("handshake", HANDSHAKE), ("modern", MODERN)])
async def test_http_listing_is_every_page_exactly_as_sent(fastmcp_http: str, era: str, version: str) -> None:
    listing = await fetch_listing(http_target(fastmcp_http, era), LIMITS)
    assert_exact(listing, TOOLS, pages=3)
    assert (listing.era, listing.protocol_version) == (era, version)
    assert listing.server_info == {"name": "drift-test-server", "version": "1.0.0"}


async def test_sse_listing_is_every_page_exactly_as_sent(tools_file: Path) -> None:
    with http_server("fastmcp_server.py", str(tools_file), "--page-size", "2", transport="sse") as url:
        listing = await fetch_listing(Target(name="sse", transport="sse", url=url), LIMITS)
    assert_exact(listing, TOOLS, pages=3)
    assert (listing.era, listing.protocol_version) == ("handshake", HANDSHAKE)


async def test_listing_follows_the_file_between_polls(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS), encoding="utf-8")
    changed = json.loads(json.dumps(TOOLS))
    changed[0]["annotations"] = {"readOnlyHint": False, "destructiveHint": True, "x-audience": "everyone"}
    changed[1]["x-vendor"]["team"] = "someone else"
    with http_server("fastmcp_server.py", str(path), "--page-size", "2") as url:
        assert_exact(await fetch_listing(http_target(url), LIMITS), TOOLS, pages=3)
        path.write_text(json.dumps(changed), encoding="utf-8")
        assert_exact(await fetch_listing(http_target(url), LIMITS), changed, pages=3)


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_list_changed_capability_is_reported(tools_file: Path, era: str) -> None:
    target = stdio_target("fastmcp_server.py", str(tools_file), "--list-changed", "advertise", era=era)
    listing = await fetch_listing(target, LIMITS)
    assert listing.list_changed_advertised
    assert listing.capabilities["tools"] == {"listChanged": True}


async def test_test_server_sends_list_changed_when_its_file_changes(tmp_path: Path) -> None:
    """The hook later work relies on: `--list-changed notify` announces an edited tools file."""
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS), encoding="utf-8")
    changed = anyio.Event()

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    command, *args = server_command("fastmcp_server.py", str(path), "--list-changed", "notify")
    async with (
        stdio_client(StdioServerParameters(command=command, args=args)) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        path.write_text(json.dumps(TOOLS[:1]), encoding="utf-8")
        with anyio.fail_after(5):
            await changed.wait()


# --- a third-party server from PyPI -----------------------------------------------------------------


@pytest.mark.parametrize(("era", "version"), [("handshake", HANDSHAKE), ("modern", MODERN)])
async def test_mcp_server_time(era: str, version: str) -> None:
    target = Target(
        name="time", transport="stdio", command=sys.executable, args=["-m", "mcp_server_time"], era=era
    )
    listing = await fetch_listing(target, LIMITS)
    assert {tool["name"] for tool in listing.tools} == {"get_current_time", "convert_time"}
    assert all(tool["inputSchema"]["type"] == "object" for tool in listing.tools)
    assert (listing.era, listing.protocol_version) == (era, version)
    assert listing.server_info is not None and listing.server_info["name"] == "mcp-time"


# --- era fallbacks ----------------------------------------------------------------------------------


FALLBACKS = [
    pytest.param("modern-only", "handshake", "modern", MODERN, id="initialize-refused-uses-discover"),
    pytest.param("legacy-only", "modern", "handshake", HANDSHAKE, id="no-discover-uses-initialize"),
]


@pytest.mark.parametrize(("mode", "asked", "used", "version"), FALLBACKS)
async def test_era_falls_back_over_stdio(mode: str, asked: str, used: str, version: str) -> None:
    listing = await fetch_listing(stdio_target("hostile_server.py", mode, era=asked), HOSTILE_LIMITS)
    assert (listing.era, listing.protocol_version) == (used, version)
    assert [tool["name"] for tool in listing.tools] == ["echo", "add"]
    assert listing.server_info == {"name": "hostile", "version": "6.6.6"}


@pytest.mark.parametrize(("mode", "asked", "used", "version"), FALLBACKS)
async def test_era_falls_back_over_http(
    hostile_http: Callable[..., str], mode: str, asked: str, used: str, version: str
) -> None:
    listing = await fetch_listing(http_target(hostile_http(mode), asked), HOSTILE_LIMITS)
    assert (listing.era, listing.protocol_version) == (used, version)
    assert [tool["name"] for tool in listing.tools] == ["echo", "add"]


# --- hostile servers: the right kind, in bounded time -----------------------------------------------


HOSTILE = [
    ("hang", "timeout", f"no answer to initialize within {TIMEOUT:g} s"),
    ("hang-after-init", "timeout", f"no answer to tools/list within {TIMEOUT:g} s"),
    ("malformed", "malformed", "not JSON-RPC"),
    ("rpc-error", "server-error", "server answered tools/list with JSON-RPC error -32603: boom"),
    ("endless-cursor", "limit", "listing exceeds 10 pages (cursor loop?)"),
    ("loop-cursor", "limit", "server repeated cursor 'a' on page 3"),
    ("huge", "limit", "listing exceeds 1000000 bytes"),
]
STDIO_ONLY = [
    ("garbage-stdout", "malformed", "'Starting hostile server v6.6.6 ... listening on stdio!'"),
    ("exit-early", "process-exit", "exited before answering initialize; stderr: fatal: cannot read config"),
]


@pytest.mark.parametrize(("mode", "kind", "fragment"), HOSTILE + STDIO_ONLY)
async def test_hostile_stdio_server(mode: str, kind: str, fragment: str) -> None:
    error = await poll_error(stdio_target("hostile_server.py", mode))
    assert error.kind == kind, error.message
    assert fragment in error.message
    assert "\n" not in error.message


@pytest.mark.parametrize(("mode", "kind", "fragment"), HOSTILE)
async def test_hostile_http_server(
    hostile_http: Callable[..., str], mode: str, kind: str, fragment: str
) -> None:
    error = await poll_error(http_target(hostile_http(mode)))
    assert error.kind == kind, error.message
    assert fragment in error.message


async def test_hang_times_out_in_the_modern_era_too(hostile_http: Callable[..., str]) -> None:
    for target in (
        stdio_target("hostile_server.py", "hang", era="modern"),
        http_target(hostile_http("hang"), "modern"),
    ):
        error = await poll_error(target)
        assert (error.kind, error.message) == (
            "timeout",
            f"no answer to server/discover within {TIMEOUT:g} s",
        )


async def test_server_ignoring_sigterm_is_killed() -> None:
    """It answers, then ignores stdin EOF and SIGTERM: the SDK's SIGKILL ends it (the leak fixture checks
    that no process outlives the poll)."""
    listing = await fetch_listing(stdio_target("hostile_server.py", "ignore-sigterm"), HOSTILE_LIMITS)
    assert [tool["name"] for tool in listing.tools] == ["echo", "add"]


async def test_too_many_tools(fastmcp_http: str) -> None:
    error = await poll_error(http_target(fastmcp_http), Limits(timeout=10.0, max_tools=4))
    assert (error.kind, error.message) == ("limit", "listing exceeds 4 tools (at page 3)")


async def test_sse_event_over_the_byte_limit(fastmcp_http: str) -> None:
    error = await poll_error(http_target(fastmcp_http), Limits(timeout=10.0, max_bytes=200))
    assert error.kind == "limit", error.message


async def test_result_the_sdk_rejects_is_kept_with_where_it_breaks_the_schema(tmp_path: Path) -> None:
    """Hosts reject it, so it is exactly what to review: kept as sent, the violations beside it (the
    poller then refuses the unnamed tool as malformed, keeping the raw payload)."""
    sent = [{"name": "no-schema"}, {"name": 7, "inputSchema": {"type": "object"}}]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(sent))
    listing = await fetch_listing(stdio_target("fastmcp_server.py", str(path)), LIMITS)
    assert listing.tools == sent
    assert listing.validation_errors == [
        "tools.0.inputSchema: Field required",
        "tools.1.name: Input should be a valid string",
    ]


# --- connecting, headers and secrets ----------------------------------------------------------------


async def test_connection_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    error = await poll_error(http_target(url))
    assert (error.kind, error.message) == ("connect", f"connection refused to {url}")


async def test_missing_command() -> None:
    target = Target(name="missing", transport="stdio", command="/nonexistent/drift-test-server")
    error = await poll_error(target)
    assert error.kind == "connect"
    assert "cannot start server command '/nonexistent/drift-test-server'" in error.message


async def test_headers_are_sent(hostile_http: Callable[..., str]) -> None:
    url = hostile_http("legacy-only", "--require-header", f"Authorization: {SECRET}")
    listing = await fetch_listing(http_target(url, headers={"Authorization": SECRET}), HOSTILE_LIMITS)
    assert [tool["name"] for tool in listing.tools] == ["echo", "add"]

    wrong = "Bearer wrong-token-9876543210"
    error = await poll_error(http_target(url, headers={"Authorization": wrong}))
    assert error.kind == "server-error"
    assert "HTTP 401 Unauthorized" in error.message
    assert "wrong-token" not in error.message


async def test_secrets_never_reach_messages(hostile_http: Callable[..., str]) -> None:
    """rpc-error repeats the secret in its error message; the client must not."""
    token = SECRET.split()[1]
    http_error = await poll_error(http_target(hostile_http("rpc-error"), headers={"Authorization": SECRET}))
    env = {"DRIFT_TEST_SECRET": token}
    stdio_error = await poll_error(stdio_target("hostile_server.py", "rpc-error", env=env))
    for error in (http_error, stdio_error):
        assert error.kind == "server-error"
        assert token not in error.message and token not in repr(error)
        assert "[redacted]" in error.message
