"""The fingerprint of a tool listing, at the import path hosts and gateways use.

`from monitor.fingerprint import fingerprint` is the documented entry point; the code lives in
`monitor.core.fingerprint` (RFC 8785 through the `rfc8785` package, nothing else of drift-monitor,
so that one file can be vendored with `rfc8785` beside it). docs/fingerprint.md has the recipe in
other languages.
"""

from monitor.core.fingerprint import (
    META_KEY,
    CanonicalListing,
    DuplicateToolNameError,
    NotIJSONError,
    canonical_form,
    canonical_json,
    canonical_tool,
    fingerprint,
    tool_fingerprint,
    without_meta,
)

__all__ = [
    "META_KEY",
    "CanonicalListing",
    "DuplicateToolNameError",
    "NotIJSONError",
    "canonical_form",
    "canonical_json",
    "canonical_tool",
    "fingerprint",
    "tool_fingerprint",
    "without_meta",
]
