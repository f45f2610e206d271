"""`drift-monitor serve`: the scheduler, alert delivery and the web app in one process."""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from monitor.cli.common import EXIT_OK, CommandError, config_option, load


def register(commands: Any) -> None:
    serve = commands.add_parser("serve", help="run the scheduler, alert delivery and the web app")
    config_option(serve)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from monitor.collect.scheduler import InstanceLockError
    from monitor.service import serve
    from monitor.store import SchemaNotReady

    config = load(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(config, args.host, args.port, ready=lambda url: print(f"READY {url}", flush=True)))
    except (InstanceLockError, SchemaNotReady) as exc:
        raise CommandError(str(exc)) from None
    return EXIT_OK
