"""Rules on model-visible text (the `poisoning` family): text that starts giving the model orders.

A tool's name, titles, description and every string of its schemas reach the model in every session
that lists the tools, whether or not anyone calls the tool, and so do a server's `instructions`. These
rules judge what a change adds to those texts (`ToolChange.added_text`), and the whole of them at
first sight: a new server's first listing, a new tool, new instructions. Each finding quotes the span
that raised it, made visible, and names where it sits. High; `text-reaches-for-secrets` is critical
when the same text also asks to hide it, send it or pass it on. The patterns are
`monitor.core.poison`'s; how they fare on a corpus of real and poisoned text is docs/rules.md's.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from monitor.core.findings import Finding, Severity, ToolChange
from monitor.core.modeltext import Added, added_between, first_sight, texts_of
from monitor.core.poison import Kind, Signal, signals
from monitor.core.rules.catalog import CATALOG, Rule, Verdict, rule
from monitor.core.text import describe_hidden, hidden_characters, make_visible, smuggled_text

FAMILY = "poisoning"
QUOTE_LIMIT = 300
"""Characters of a span quoted in a finding."""
SENT_AWAY = frozenset({Kind.HIDE, Kind.SEND, Kind.PASS, Kind.DATA_URL})
"""What turns a reach for secrets critical when the same text asks it too."""

Judged = Sequence[tuple[Added, list[Signal]]]


def _found(
    rule: Rule, subject: ToolChange | None, judged: Judged, kinds: frozenset[Kind], what: str
) -> Iterator[Finding]:
    """One finding per text in which a change added a signal of `kinds`, quoting the first of them."""
    for added, found in judged:
        if not found:
            continue  # most texts: no signal at all
        matched = [s for s in found if s.kind in kinds and added.adds(s.start, s.end)]
        if not matched:
            continue
        first = matched[0]
        quote = quoted(added.text, first.start, first.end)
        severity = None
        if Kind.SECRET in kinds and any(
            s.kind in SENT_AWAY and added.adds(s.start, s.end) for s in found if s.kind not in kinds
        ):
            severity = Severity.CRITICAL
        whose = f" of {subject.label()}" if subject is not None else ""
        yield rule.finding(
            subject,
            added.where,
            None,
            quote,
            f'The {added.where}{whose} {what}: "{quote}"',
            detail={
                "where": added.where,
                "quote": quote,
                "span": [first.start, first.end],
                "spans": [[s.start, s.end] for s in matched],
                "text": clip(added.text),
            },
            severity=severity,
        )


def quoted(text: str, start: int, end: int) -> str:
    """The sentence that holds the span, as a reader may see it: visible, and cut to `QUOTE_LIMIT`."""
    before = max(
        (m.end() for m in _SENTENCE_END.finditer(text, max(0, start - QUOTE_LIMIT), start)), default=None
    )
    after = _SENTENCE_END.search(text, end, min(len(text), end + QUOTE_LIMIT))
    first = before if before is not None else max(0, start - QUOTE_LIMIT // 3)
    last = after.start() + 1 if after is not None else min(len(text), end + QUOTE_LIMIT // 3)
    shown = text[first:last].strip()
    return clip(make_visible(shown), QUOTE_LIMIT)


_SENTENCE_END = re.compile(r"[.!?。！？](?=\s|$)|\n")


def clip(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


CONTENT: dict[str, tuple[frozenset[Kind], str]] = {}
"""Each content rule's signals, and what a finding of it says the text does."""


def _content_rule(rule_id: str, meaning: str, kinds: Iterable[Kind], what: str) -> None:
    """A content rule: the texts a change adds, judged for `kinds` (at first sight too)."""
    wanted = frozenset(kinds)
    CONTENT[rule_id] = (wanted, what)

    def check(rule: Rule, change: ToolChange) -> Iterator[Finding]:
        if not wanted.isdisjoint(change.added_kinds):
            yield from _found(rule, change, change.added_text, wanted, what)

    rule(rule_id, Severity.HIGH, meaning, family=FAMILY, first_sight=True)(check)


_content_rule(
    "text-reaches-for-secrets",
    "Text the model reads asks it to read local files, keys, config, the environment or the conversation; "
    "critical when it also asks to hide that or to send it on.",
    {Kind.SECRET},
    "asks the model to reach for secrets",
)
_content_rule(
    "text-sends-data-away",
    "Text the model reads asks it to send data to an address, a URL or another tool.",
    {Kind.SEND},
    "asks the model to send data away",
)
_content_rule(
    "text-redirects-other-tools",
    "Text the model reads tells it how to call another tool (when X is called, always add ...).",
    {Kind.REDIRECT},
    "tells the model how to use other tools",
)
_content_rule(
    "text-hides-from-user",
    "Text the model reads asks it to keep something from the user or to skip asking them.",
    {Kind.HIDE},
    "asks the model to hide something from the user",
)
_content_rule(
    "text-claims-authority",
    "Text the model reads claims authority over it (a system or administrator message, an important "
    "notice to obey, ignore previous instructions).",
    {Kind.AUTHORITY},
    "claims authority over the model",
)
_content_rule(
    "data-in-url",
    "Text the model reads holds a URL or markdown image that carries data the model would fill in.",
    {Kind.DATA_URL},
    "carries a URL that sends data",
)
_content_rule(
    "encoded-payload",
    "Text the model reads holds a long base64 or hex payload, or a shorter one that decodes to text.",
    {Kind.ENCODED},
    "carries an encoded payload",
)
_content_rule(
    "text-runs-code",
    "Text the model reads asks it to run a downloaded script, or to plant a command where it will run "
    "(a git hook, a shell profile, a scheduled job).",
    {Kind.RUN},
    "asks the model to run code",
)
_content_rule(
    "control-sequence",
    "Text the model reads holds control characters or ANSI escape sequences.",
    {Kind.CONTROL},
    "holds control characters",
)
_content_rule(
    "text-out-of-sight",
    "Text the model reads pushes words out of sight with a long run of spaces or blank lines.",
    {Kind.OUT_OF_SIGHT},
    "pushes text out of sight",
)


@rule(
    "hidden-text-in-description",
    Severity.HIGH,
    "Text the model reads gained characters a reader cannot see (zero-width, bidi controls, Unicode "
    "tags, other format characters), a way to hide instructions from reviewers but not from models.",
    family=FAMILY,
    first_sight=True,
)
def _hidden_text(rule: Rule, change: ToolChange) -> Iterator[Finding]:
    before = texts_of(change.old) if change.old is not None else {}
    yield from hidden_text(rule, change, [added for added, _ in change.added_text], before)


def hidden_text(
    rule: Rule, subject: ToolChange | None, texts: Iterable[Added], before: Mapping[str, str]
) -> Iterator[Finding]:
    """Hidden characters among what each text added that it did not hold before (`before`: the texts
    as they were, by where), but those that belong to an emoji."""
    for added in texts:
        if not hidden_characters(added.text):
            continue  # most texts: nothing hidden at all
        emoji = _emoji_parts(added.text)
        chars = {added.text[i] for span in added.spans for i in range(span.start, span.end) if i not in emoji}
        held = hidden_characters(before.get(added.where, ""))
        hidden = {c for c in hidden_characters("".join(chars)) - held if unicodedata.category(c) != "Cc"}
        if not hidden:
            continue
        smuggled = smuggled_text(added.text)
        reads = "".join(f' Hidden text reads: "{run}".' for run in smuggled[:3])
        whose = f" of {subject.label()}" if subject is not None else ""
        yield rule.finding(
            subject,
            added.where,
            None,
            clip(make_visible(added.text), QUOTE_LIMIT),
            f"The {added.where}{whose} now contains invisible characters: {_describe(hidden)}.{reads}",
            detail={"codepoints": [f"U+{ord(c):04X}" for c in sorted(hidden)], "hidden_text": smuggled},
        )


def _emoji_parts(text: str) -> frozenset[int]:
    """Positions of joiners and selectors that belong to an emoji: a variation selector after a symbol
    (U+26A0 U+FE0F), a zero-width joiner between two (a family emoji), the tags of a flag (U+1F3F4
    with tags, ended by U+E007F). Elsewhere they hide text."""
    found: set[int] = set()
    for index, char in enumerate(text):
        code = ord(char)
        before = text[index - 1] if index else ""
        after = text[index + 1] if index + 1 < len(text) else ""
        if (
            (code in (0xFE0E, 0xFE0F) and before and _symbol(before))
            or (code == 0x200D and _symbol(before.rstrip("\ufe0f")) and after and _symbol(after))
            or (0xE0020 <= code <= 0xE007F and _in_flag(text, index))
        ):
            found.add(index)
    return frozenset(found)


def _symbol(char: str) -> bool:
    return bool(char) and (unicodedata.category(char) == "So" or 0x1F000 <= ord(char) <= 0x1FAFF)


def _in_flag(text: str, index: int) -> bool:
    start = index
    while start > 0 and 0xE0020 <= ord(text[start - 1]) <= 0xE007E:
        start -= 1
    end = index
    while end < len(text) and 0xE0020 <= ord(text[end]) <= 0xE007E:
        end += 1
    return start > 0 and text[start - 1] == "\U0001f3f4" and end < len(text) and text[end] == "\U000e007f"


def _describe(chars: set[str]) -> str:
    """Each hidden character by name, except Unicode tags, which are counted (their text is decoded)."""
    tags = {char for char in chars if 0xE0000 <= ord(char) <= 0xE007F}
    parts = [describe_hidden(chars - tags)] if chars - tags else []
    if tags:
        parts.append(f"{len(tags)} distinct Unicode tag character(s) (U+E0000-U+E007F)")
    return ", ".join(parts)


# --- other servers' tools ----------------------------------------------------------------------------


@rule(
    "shadows-other-server",
    Severity.HIGH,
    "Text the model reads names a tool that another monitored server lists and this one does not: "
    "a description steering how another server's tool is used.",
    scope="server",
    family=FAMILY,
)
def shadowing(
    rule: Rule,
    changes: Sequence[ToolChange],
    own: Iterable[str],
    listed_elsewhere: Callable[[set[str]], Mapping[str, Sequence[str]]],
) -> list[Verdict]:
    """For each changed tool, another server's tool its added text names; a changed tool whose text as a
    whole names none is cleared. `listed_elsewhere(names)` says which of `names` other monitored
    servers list (name -> those servers): asked only for the tool-like names the texts hold, never
    for this server's own (`own`)."""
    mine = set(own)
    wanted = {
        name
        for change in changes
        if change.new is not None
        for text in first_sight(change.new)
        for name in _TOOL_LIKE.findall(text.text)
        if name not in mine
    }
    foreign = (
        {name: servers for name, servers in listed_elsewhere(wanted).items() if name in wanted}
        if wanted
        else {}
    )
    found: list[Verdict] = []
    for change in changes:
        if change.new is None:
            continue
        hits = [(added, hit) for added, _ in change.added_text if (hit := _named(added, foreign))]
        if not hits:
            if not any(_named(whole, foreign) for whole in first_sight(change.new)):
                found.append(rule.cleared(change.name))
            continue
        added, (name, start, end) = hits[0]
        servers = ", ".join(sorted(foreign[name])[:5])
        quote = quoted(added.text, max(0, start - 60), min(len(added.text), end + 60))
        found.append(
            rule.finding(
                change,
                added.where,
                None,
                name,
                f"The {added.where} of {change.label()} names {make_visible(name)}, a tool of {servers} "
                f'that this server does not list: "{quote}".',
                detail={"where": added.where, "quote": quote, "span": [start, end], "tool": name},
            )
        )
    return found


_TOOL_LIKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:[_.-][A-Za-z0-9]+)+\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b")
"""Names that cannot be ordinary words (`send_email`, `get-issue`, `readFile`): the only ones judged as
references to another server's tool, so that a description saying "search" names no `search` tool."""


def _named(added: Added, names: Mapping[str, object]) -> tuple[str, int, int] | None:
    if not names:
        return None
    text = added.text
    for name in names:
        start = text.find(name)
        while start >= 0:
            end = start + len(name)
            bounded = (start == 0 or not _word(text[start - 1])) and (
                end == len(text) or not _word(text[end])
            )
            if bounded and added.adds(start, end):
                return name, start, end
            start = text.find(name, start + 1)
    return None


def _word(char: str) -> bool:
    return char.isalnum() or char in "_-"


# --- server instructions -----------------------------------------------------------------------------


@rule(
    "instructions-changed",
    Severity.MEDIUM,
    "The server's instructions (which hosts put in the model's context for every session) changed, "
    "appeared or were removed; the content rules judge what they add.",
    scope="server",
    family=FAMILY,
)
def instructions_changed(rule: Rule, server: str, before: str | None, after: str | None) -> Finding | None:
    """Judged when a new version's instructions differ from the previous version's."""
    if before == after or (before is None and after is None):
        return None
    said = "were removed" if after is None else "appeared" if before is None else "changed"
    return rule.finding(
        None,
        "instructions",
        clip(before) if before is not None else None,
        clip(after) if after is not None else None,
        f"The instructions of {server} {said}.",
    )


def instructions_verdicts(
    server: str, before: str | None, after: str | None, *, first: bool
) -> list[Verdict]:
    """What a version's instructions raise: `instructions-changed` when they differ from the previous
    version's (not at the server's `first` version), and the content rules on what they add; a content
    rule that the instructions as a whole no longer raise is cleared."""
    verdicts: list[Verdict] = [] if first else [instructions_changed(server, before, after)]
    old, new = ({"instructions": text} if text else {} for text in (before, after))
    judged = [(added, signals(added.text)) for added in added_between(old, new)]
    whole = [(added, signals(added.text)) for added in added_between({}, {"instructions": after or ""})]
    for rule_id, (kinds, what) in CONTENT.items():
        found = list(_found(CATALOG[rule_id], None, judged, kinds, what))
        verdicts += found
        if not found and not any(s.kind in kinds for _, signalled in whole for s in signalled):
            verdicts.append(CATALOG[rule_id].cleared())
    hidden = CATALOG["hidden-text-in-description"]
    hiding = list(hidden_text(hidden, None, [added for added, _ in judged], old))
    verdicts += hiding
    if not hiding and not any(hidden_text(hidden, None, [added for added, _ in whole], {})):
        verdicts.append(hidden.cleared())
    return verdicts
