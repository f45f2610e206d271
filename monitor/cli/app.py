"""The `drift-monitor` command line's parser: every command but `hook`, one module per group of commands.

Each command module has `register(commands)`, which adds its subcommands with a `run(args) -> int`.
Commands import what they need when they run, so the offline ones never load the MCP SDK or the
database layer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata

from monitor.approvals import cli as approvals
from monitor.cli import database, offline, serve
from monitor.config import ConfigError
from monitor.console import logs
from monitor.console.common import EXIT_BROKEN_PIPE, EXIT_USAGE, CommandError
from monitor.core.listing import ListingError
from monitor.core.text import make_visible
from monitor.servers import cli as registry
from monitor.silences import cli as silence
from monitor.tokens import cli as token

COMMAND_GROUPS = (offline, database, serve, registry, approvals, silence, token)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "logs", False):
        logs.quiet()
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at interpreter exit
    except BrokenPipeError:
        # The reader went away (`drift-monitor diff ... | head`): stop quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except (CommandError, ListingError, ConfigError) as exc:
        print(f"drift-monitor: {make_visible(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except RecursionError:
        print("drift-monitor: input is nested too deeply to compare", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not type(exc).__module__.startswith("sqlalchemy"):
            raise
        # A full, read-only or unreachable database: say so in one line, not a traceback.
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"drift-monitor: database error: {make_visible(reason)}", file=sys.stderr)
        return EXIT_USAGE
    return code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drift-monitor",
        description="Watch what MCP servers claim about their tools, and when the claim changes.",
    )
    parser.add_argument("--version", action="version", version=f"drift-monitor {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(commands)
    return parser


def _version() -> str:
    try:
        return metadata.version("drift-monitor")
    except metadata.PackageNotFoundError:
        return "unknown"
