"""`drift-monitor serve`: the scheduler, alert delivery and the web app in one process."""

from __future__ import annotations

import argparse
import asyncio
import functools
from typing import Any

from monitor.console import logs
from monitor.console.common import EXIT_OK, CommandError, config_option, load


def register(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run the scheduler, alert delivery and the web app")
    config_option(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: one object per line, for shippers",
    )
    serve.set_defaults(run=_run_serve, logs=True)


def _run_serve(args: argparse.Namespace) -> int:
    from monitor.collect.instancelock import InstanceLockError
    from monitor.service import StartupError, serve
    from monitor.store import SchemaNotReady

    config = load(args)
    logs.configure(args.log_level, args.log_format)
    try:
        ready = lambda url: print(f"READY {url}", flush=True)  # noqa: E731
        log_setup = functools.partial(logs.configure, args.log_level, args.log_format)
        asyncio.run(serve(config, args.host, args.port, ready=ready, log_setup=log_setup))
    except (InstanceLockError, SchemaNotReady, StartupError) as exc:
        raise CommandError(str(exc)) from None
    return EXIT_OK
