"""Numbers JSON has no spelling for (NaN, infinities, 1e400) never reach a receiver or a fingerprint.

Listings carrying them are refused at the poll (tests/security/test_hostile_listings.py); what a
database filled before that check still holds is sent as strict JSON, and offline input carrying
them is refused with a message, as docs/contract.md section 2 asks, instead of given a fingerprint.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from monitor.core.listing import ListingError, load_listing
from monitor.sinks import render
from monitor.sinks.base import WebhookConfig


def strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("style", ["standard", "slack"])
def test_a_webhook_body_is_strict_json_even_with_a_stored_nan(style: str) -> None:
    payload = {
        "type": "alert.opened",
        "alert": {
            "id": 1,
            "rule": "input-schema-changed",
            "severity": "low",
            "server": "s",
            "tool": "t",
            "message": "changed",
            "opened_at": "2026-01-01T00:00:00Z",
            "url": "http://127.0.0.1/alerts/1",
        },
        "findings": [
            {"rule": "input-schema-changed", "old": float("nan"), "new": [float("inf"), -float("inf")]}
        ],
    }
    body = strict(render(WebhookConfig(name="w", url="http://127.0.0.1/", format=style), payload))
    if style == "standard":
        assert body["findings"][0]["old"] == "NaN"
        assert body["findings"][0]["new"] == ["Infinity", "-Infinity"]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "1" + "0" * 400])
def test_an_offline_listing_with_a_non_json_number_is_refused(tmp_path: Path, number: str) -> None:
    path = tmp_path / "tools.json"
    path.write_text(
        '{"tools": [{"name": "t", "inputSchema": {"type": "object", "default": ' + number + "}}]}"
    )
    with pytest.raises(ListingError, match=re.escape("not I-JSON: tools[0].inputSchema.default")):
        load_listing(path)
