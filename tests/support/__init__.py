"""What the tests (and the benchmarks) share: processes, servers, the fleet, `serve`, a webhook
receiver, tool definitions and recorded polls; the web app and its test client are `support.web`.
tests/conftest.py puts the tests folder on sys.path, so `from support import ...` works in every
test module; no test module imports another."""

from support.databases import postgres_schema
from support.fleet import Fleet, fleet, raw_fleet
from support.polls import poll_history, record_poll, stored_tools
from support.processes import WAIT, Process, ProcessError, child_processes, no_leaked_children, wait_until
from support.receiver import Receiver, Reply, Request, verify, webhook_secret
from support.servers import (
    SERVERS,
    HeldConnections,
    faulty_http,
    free_port,
    held_connections,
    http_server,
    http_server_command,
    http_server_process,
    refused_url,
    server_command,
)
from support.service import Service, cli, migrate_config, run_cli, serving
from support.tools import numbered_tools, read_only_flip, tool, versioned_listing

__all__ = [
    "SERVERS",
    "WAIT",
    "Fleet",
    "HeldConnections",
    "Process",
    "ProcessError",
    "Receiver",
    "Reply",
    "Request",
    "Service",
    "child_processes",
    "cli",
    "faulty_http",
    "fleet",
    "free_port",
    "held_connections",
    "http_server",
    "http_server_command",
    "http_server_process",
    "migrate_config",
    "no_leaked_children",
    "numbered_tools",
    "poll_history",
    "postgres_schema",
    "raw_fleet",
    "read_only_flip",
    "record_poll",
    "refused_url",
    "run_cli",
    "server_command",
    "serving",
    "stored_tools",
    "tool",
    "verify",
    "versioned_listing",
    "wait_until",
    "webhook_secret",
]
