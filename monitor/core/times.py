"""How an instant reads to a person: `2026-03-01 12:00:00 UTC`, to the second, in UTC.

Every page, and every sentence the monitor writes for people to read (a resolution, a decision's
reason, a finding's message, an error), says a time this one way, so that two times on one screen
compare at a glance and none shows raw ISO 8601 with microseconds. Machines get ISO 8601: the API's
fields, webhook bodies, the `datetime` attribute of a page's `<time>`.
"""

from __future__ import annotations

from datetime import UTC, datetime


def utc_parts(value: datetime) -> tuple[str, str]:
    """The day and the time of day of `value` in UTC: `("2026-03-01", "12:00:00")`."""
    utc = value.astimezone(UTC)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}",
        f"{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}",
    )


def utc_text(value: datetime) -> str:
    """`2026-03-01 12:00:00 UTC`: the instant as people read it here (seconds, never fractions)."""
    day, clock = utc_parts(value)
    return f"{day} {clock} UTC"
