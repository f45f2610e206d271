"""What a fetched listing must pass before it is stored: no reflected secrets, I-JSON only.

A hostile (or careless) server may echo the `Authorization` value it was sent into
`serverInfo.name` or a description; stored, it would be shown by every page and API response and
kept in every backup. Configured secret values are replaced by `[redacted]` wherever they appear,
before the listing is fingerprinted, stored or diffed. Then the listing must be I-JSON
(`monitor.core.ijson`): a `NaN`, an infinity or a lone surrogate makes the poll `malformed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from monitor.collect.client import FetchedListing, PollError, Target
from monitor.core.ijson import ijson_problem
from monitor.core.states import PollErrorKind

REDACTED = "[redacted]"


@dataclass(frozen=True)
class Guarded:
    listing: FetchedListing
    redactions: int
    """How many strings had a configured secret replaced."""


def guard_listing(target: Target, fetched: FetchedListing) -> Guarded:
    """The listing with secrets redacted, or a `malformed` PollError when its serverInfo or
    capabilities are not I-JSON."""
    # The tools are checked with the rest of the listing (`validate_tools`); these ride along.
    problem = (
        ijson_problem(fetched.server_info, "serverInfo")
        or ijson_problem(fetched.capabilities, "capabilities")
        or ijson_problem(fetched.instructions, "instructions")
    )
    if problem is not None:
        message = f"not I-JSON: {_redact_text(problem, target)}"
        raise PollError(PollErrorKind.MALFORMED, message)
    secrets = target.secret_values()
    if not secrets:
        return Guarded(fetched, 0)
    counter = [0]
    tools = redact(fetched.tools, secrets, counter)
    server_info = redact(fetched.server_info, secrets, counter)
    capabilities = redact(fetched.capabilities, secrets, counter)
    instructions = redact(fetched.instructions, secrets, counter)
    if not counter[0]:
        return Guarded(fetched, 0)
    redacted = replace(
        fetched,
        tools=tools,
        server_info=server_info,
        capabilities=capabilities,
        instructions=instructions,
        digest=None,
    )
    return Guarded(redacted, counter[0])


def redact(value: Any, secrets: Sequence[str], counter: list[int]) -> Any:
    """`value` with every secret in its strings (object keys included) replaced by `[redacted]`."""
    if isinstance(value, str):
        return _redact_string(value, secrets, counter)
    if isinstance(value, list):
        return [redact(item, secrets, counter) for item in value]
    if isinstance(value, dict):
        return {
            _redact_string(key, secrets, counter) if isinstance(key, str) else key: redact(
                item, secrets, counter
            )
            for key, item in value.items()
        }
    return value


def _redact_string(text: str, secrets: Sequence[str], counter: list[int]) -> str:
    original = text
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if text is not original:
        counter[0] += 1
    return text


def _redact_text(text: str, target: Target) -> str:
    return _redact_string(text, target.secret_values(), [0])


def refusal_message(error: Exception, target: Target) -> str:
    """Why the database refused a listing, in one visible line without secrets or the refused value."""
    cause = getattr(error, "orig", None) or error
    first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if len(first) > 300:
        first = first[:300] + "…"
    visible = "".join(char if char.isprintable() else ascii(char)[1:-1] for char in first)
    return f"the database refused the listing ({type(cause).__name__}: {_redact_text(visible, target)})"
