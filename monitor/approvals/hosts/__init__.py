"""Host adapters: one module per host or gateway that asks the decision point over HTTP before a
call, each answering in the host's own terms without widening what the host allows on its own
(docs/approvals.md has each host's contract, with its sources).

Every `HostAdapter` subclass in a module of this package is found here at import, by its `path`: no
list to add it to. `monitor.approvals.hooks` serves each at its path; agentgateway, which speaks
gRPC, is `monitor.approvals.gateway`. To add a host, see CONTRIBUTING.md.
"""

from __future__ import annotations

from monitor.approvals.hosts.base import HostAdapter
from monitor.core.discovery import defined_in


def _found() -> dict[str, HostAdapter]:
    """An instance of every adapter defined in a module of this package, by its path, in path order."""
    adapters: dict[str, HostAdapter] = {}
    for adapter in defined_in(__name__, __path__, HostAdapter, marker="path"):
        if adapter.path in adapters:
            raise TypeError(f"two host adapters answer at {adapter.path}")
        adapters[adapter.path] = adapter()
    return dict(sorted(adapters.items()))


HOSTS: dict[str, HostAdapter] = _found()
"""Every host adapter by the path it answers at."""
HOOK_PATHS = frozenset(HOSTS)
"""Paths that read their body themselves, so that one over the size limit is answered, not refused."""
BASIC_AUTH_PATHS = frozenset(path for path, adapter in HOSTS.items() if adapter.basic_auth)
"""Paths whose caller may send the token as the password of Basic authentication."""

__all__ = ["BASIC_AUTH_PATHS", "HOOK_PATHS", "HOSTS", "HostAdapter"]
