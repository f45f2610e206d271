"""The fingerprint of a tool listing, at the import path hosts and gateways use.

`from monitor.fingerprint import fingerprint` is the documented entry point; the code lives in
`monitor.core.fingerprint` (standard library only, so that one file can be vendored as it is).
"""

from monitor.core.fingerprint import (
    META_KEY,
    CanonicalListing,
    canonical_form,
    canonical_tool,
    fingerprint,
    tool_fingerprint,
    without_meta,
)

__all__ = [
    "META_KEY",
    "CanonicalListing",
    "canonical_form",
    "canonical_tool",
    "fingerprint",
    "tool_fingerprint",
    "without_meta",
]
