"""The `drift-monitor` command line (docs/contract.md section 6): one module per group of commands.

`drift-monitor hook ...` runs before every tool call of a host, so it is dispatched here before any
other command's modules load (`monitor.approvals.hookcommand` needs only the standard library); every
other command goes through the parser in `monitor.cli.app`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["hook"]:
        from monitor.approvals.hookcommand import main as hook

        return hook(args[1:])
    from monitor.cli.app import main as run

    return run(args)
