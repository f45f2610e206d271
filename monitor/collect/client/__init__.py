"""The MCP client the poller and watch sessions use, by concern.

`target` (what a poll is given and returns), `poll` (connect, negotiate, every page), `watch` (the
long-lived session), `errors` (every failure as one readable `PollError`), `http` and `stdio` (the
transports' plumbing: the SSRF guard, capped bodies, stderr), `schema` (the SDK's schema check of a
`tools/list` page, without the dump it throws away).
"""

from monitor.collect.client.http import resolved_addresses
from monitor.collect.client.poll import fetch_listing
from monitor.collect.client.target import Era, FetchedListing, Limits, PollError, Target
from monitor.collect.client.watch import watch_list_changed

__all__ = [
    "Era",
    "FetchedListing",
    "Limits",
    "PollError",
    "Target",
    "fetch_listing",
    "resolved_addresses",
    "watch_list_changed",
]
