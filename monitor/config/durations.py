"""Durations in the config: `90`, `"90s"`, `"5m"`, `"1h30m"` or `"250ms"`, read as seconds."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """Seconds from `90`, `"90s"`, `"5m"`, `"1h30m"` or `"250ms"`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if "".join(number + unit for number, unit in parts) != text:
            raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 5m, 1h30m, 250ms)")
        seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    else:
        raise ValueError(f"{value!r} is not a duration (use e.g. 90s, 5m, 1h30m, 250ms)")
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
DurationOrOff = Annotated[
    float, BeforeValidator(lambda v: 0.0 if v in (0, "0", "off") else parse_duration(v))
]
"""A duration, or 0 (`"off"`): never."""
