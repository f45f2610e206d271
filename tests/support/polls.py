"""Recording polls straight into a Store, for tests of what the store does with them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from monitor.core.fingerprint import CanonicalListing
from monitor.store import PollOutcome, Store


def record_poll(
    store: Store,
    server_id: int,
    tools: list[dict[str, Any]] | CanonicalListing,
    at: datetime,
    **handshake: Any,
) -> PollOutcome:
    """Record a successful poll that listed `tools`, started and finished at `at`.

    The handshake details (one page, protocol 2025-11-25, no server info or capabilities, no
    list-changed) are the same in every such test; `handshake` overrides any of them.
    """
    listing = tools if isinstance(tools, CanonicalListing) else CanonicalListing.of(tools)
    details: dict[str, Any] = {
        "pages": 1,
        "protocol_version": "2025-11-25",
        "server_info": None,
        "capabilities": {},
        "list_changed_advertised": False,
        "finished_at": at,
        **handshake,
    }
    return store.record_success(server_id, listing, started_at=at, **details)
