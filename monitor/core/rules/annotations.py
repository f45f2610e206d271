"""Rules on behavioural annotations: effective hint flips, and an annotations object dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.listing import HINT_DEFAULTS, EffectiveHints, annotations_of, sdk_boolean
from monitor.core.rules.catalog import Rule, rule


def _hint_detail(change: ToolChange, hint: str) -> dict[str, Any]:
    old_annotations = annotations_of(change.old or {}) or {}
    new_annotations = annotations_of(change.new or {}) or {}
    return {
        "raw_old": old_annotations.get(hint),
        "raw_new": new_annotations.get(hint),
        "declared_old": hint in change.old_hints.declared,
        "declared_new": hint in change.new_hints.declared,
    }


def _raw_json(tool: Any, hint: str) -> str:
    """The hint's value as sent, as short JSON for a message."""
    raw = (annotations_of(tool or {}) or {}).get(hint)
    text = json.dumps(raw, ensure_ascii=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _hint_flip(
    change: ToolChange, hint: str, old_value: bool, *, write_only: bool = False
) -> tuple[bool, bool] | None:
    """(old, new) effective values when `hint` flipped away from `old_value` and the hint applies."""
    if change.both is None:
        return None
    if write_only and not (change.old_hints.applies(hint) and change.new_hints.applies(hint)):
        return None
    old, new = change.old_hints.get(hint), change.new_hints.get(hint)
    return (old, new) if old == old_value and new != old_value else None


def _write_profile(hints: EffectiveHints) -> str:
    destructive = "destructive" if hints.destructiveHint else "non-destructive"
    idempotent = "idempotent" if hints.idempotentHint else "not idempotent"
    return f"{destructive} and {idempotent}"


def _hint_rule(
    rule_id: str, severity: Severity, hint: str, old_value: bool, meaning: str, message: str
) -> None:
    """A rule for one effective hint flipping from `old_value`; `message` is formatted with the tool."""
    write_only = hint in ("destructiveHint", "idempotentHint")

    def check(rule: Rule, change: ToolChange) -> Iterator[Finding]:
        flip = _hint_flip(change, hint, old_value, write_only=write_only)
        if flip is not None:
            text = message.format(tool=change.label())
            if hint == "readOnlyHint" and not flip[1]:
                text += f" It now reads as {_write_profile(change.new_hints)}."
            if hint not in change.new_hints.declared:
                text += f" ({hint} is no longer declared, so it reads as the default {HINT_DEFAULTS[hint]})."
            elif hint in change.new_hints.not_boolean:
                raw, read = _raw_json(change.new, hint), str(flip[1]).lower()
                text += f" ({hint} is {raw}, not a boolean: hosts on the MCP Python SDK read it as {read})."
            yield rule.finding(
                change, f"annotations.{hint}", flip[0], flip[1], text, detail=_hint_detail(change, hint)
            )

    rule(rule_id, severity, meaning)(check)


_hint_rule(
    "read-only-revoked",
    Severity.CRITICAL,
    "readOnlyHint",
    True,
    "The tool was read-only and now may write, while hosts that cached the old listing still treat it "
    "as a read.",
    "{tool} is no longer read-only: it may now write, while hosts that cached the old listing still "
    "call it without confirmation.",
)
_hint_rule(
    "read-only-claimed",
    Severity.HIGH,
    "readOnlyHint",
    False,
    "A tool that could write now claims to be read-only and asks to be called without a gate.",
    "{tool} now claims to be read-only, so hosts will stop asking before calling it.",
)
_hint_rule(
    "destructive-added",
    Severity.HIGH,
    "destructiveHint",
    False,
    "A writing tool that was declared non-destructive may now destroy data.",
    "{tool} may now perform destructive updates.",
)
_hint_rule(
    "destructive-removed",
    Severity.HIGH,
    "destructiveHint",
    True,
    "A writing tool that was destructive now claims it is not, asking for less friction.",
    "{tool} no longer declares itself destructive, so hosts may stop confirming its calls.",
)
_hint_rule(
    "idempotent-revoked",
    Severity.HIGH,
    "idempotentHint",
    True,
    "The tool was safe to repeat and no longer is: hosts that retry on timeout would repeat an effect.",
    "{tool} is no longer idempotent: a host that retries it after a timeout would repeat its effect.",
)
_hint_rule(
    "idempotent-claimed",
    Severity.MEDIUM,
    "idempotentHint",
    False,
    "The tool now claims it is safe to repeat, so hosts may start retrying it.",
    "{tool} now claims to be idempotent, so hosts may retry it automatically.",
)
_hint_rule(
    "open-world-added",
    Severity.MEDIUM,
    "openWorldHint",
    False,
    "The tool now reaches outside its own closed domain (the internet, other people's systems).",
    "{tool} now interacts with an open world of external entities.",
)
_hint_rule(
    "open-world-removed",
    Severity.LOW,
    "openWorldHint",
    True,
    "The tool now claims to stay inside a closed domain.",
    "{tool} no longer declares that it reaches an open world of external entities.",
)


@rule(
    "annotations-removed",
    Severity.MEDIUM,
    "The tool had an annotations object and now has none, so it reads with the pessimistic defaults.",
)
def _annotations_removed(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.both is None:
        return
    old = annotations_of(change.both[0])
    if old is not None and annotations_of(change.both[1]) is None:
        yield rule.finding(
            change,
            "annotations",
            old,
            change.both[1].get("annotations"),
            f"{change.label()} dropped its annotations object; every hint now reads as its default.",
        )


@rule(
    "hint-not-boolean",
    Severity.MEDIUM,
    'A hint is not a JSON boolean (`"true"`, `1`, `null`): Python SDK hosts read `"true"` or `1` as '
    "true, TypeScript SDK hosts reject the listing. Judged as the Python SDK reads it (docs/clients.md).",
)
def _hint_not_boolean(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    if change.new is None:
        return
    old_raw = annotations_of(change.old or {}) or {}
    new_raw = annotations_of(change.new) or {}
    for hint in sorted(change.new_hints.not_boolean):
        if (
            change.old is not None
            and hint in change.old_hints.not_boolean
            and old_raw.get(hint) == new_raw.get(hint)
        ):
            continue  # not new in this change
        raw = new_raw.get(hint)
        read = sdk_boolean(raw)
        if read is None:
            reading = (
                "hosts on the MCP Python SDK read null as absent"
                if raw is None
                else "hosts on the MCP Python SDK reject the listing over it"
            )
            reading += f" and the monitor reads it as the default {str(HINT_DEFAULTS[hint]).lower()}"
        else:
            reading = f"hosts on the MCP Python SDK read it as {str(read).lower()}, and so does the monitor"
        yield rule.finding(
            change,
            f"annotations.{hint}",
            old_raw.get(hint),
            raw,
            f"{change.label()} declares {hint} as {_raw_json(change.new, hint)}, not a boolean: {reading}; "
            "hosts on the TypeScript SDK reject the whole listing.",
            detail={"python_sdk": read, "typescript_sdk": "listing rejected"},
        )
