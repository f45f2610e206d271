"""What every command shares: exit codes, one-line errors, the config option, the store, and who the
command line is.

Whoever can run commands against the database is trusted like an admin (they could edit it
directly); their changes are recorded, like every other, as `command line (<login name>)` from
`command line`.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import TYPE_CHECKING, TextIO

from monitor.config import Config, load_config
from monitor.core.findings import Severity
from monitor.core.roles import Caller, Role, Via
from monitor.core.text import make_visible

if TYPE_CHECKING:
    from monitor.store import Store

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_POLL_FAILED = 3
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, what a shell reports for a command whose reader closed the pipe."""
DEFAULT_CONFIG = "drift-monitor.toml"


class CommandError(Exception):
    """An error the user can fix; printed as one line, exit code 2."""


def config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get("DRIFT_MONITOR_CONFIG"),
        help="TOML config file (default: $DRIFT_MONITOR_CONFIG, else drift-monitor.toml if present)",
    )


def load(args: argparse.Namespace) -> Config:
    """The config named by --config, $DRIFT_MONITOR_CONFIG or ./drift-monitor.toml; else defaults."""
    path = args.config
    if path is None and os.path.exists(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    config = load_config(path)
    for problem in config.skipped:  # the rest of the import is used: say what was left out, go on
        print(f"drift-monitor: warning: {make_visible(problem)}", file=sys.stderr)
    return config


def open_store(config: Config) -> Store:
    """The store commands record polls through: findings open alerts and queue webhooks, as under `serve`."""
    from monitor.notify.alerts import alerting_store
    from monitor.store import SchemaNotReady, check_schema, make_engine

    engine = make_engine(config.monitor.database_url)
    try:
        check_schema(engine)
    except SchemaNotReady as exc:
        raise CommandError(str(exc)) from None
    return alerting_store(engine, config)[0]


def severity(value: str) -> Severity:
    """An argparse type: a severity name."""
    try:
        return Severity.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def wants_colour(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def command_line() -> Caller:
    """The caller a command is: its login name, as an admin, from the command line."""
    try:
        name = f"command line ({getpass.getuser()})"
    except (KeyError, OSError):
        name = "command line"
    return Caller(name, Role.ADMIN, Via.COMMAND_LINE, "command line")
