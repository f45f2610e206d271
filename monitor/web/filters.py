"""What pages show server text and values with: filters that make hostile text inert and visible,
times, badges, links to tools and definitions, and JSON shown bounded.

Templates autoescape, and the environment's `finalize` (`finalize` here) turns every string it prints
into escaped text with invisible and direction-changing characters replaced by a visible, marked
code point; attributes use the `plain` filter instead.
"""

from __future__ import annotations

import heapq
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jinja2 import pass_context
from jinja2.runtime import Context
from markupsafe import Markup, escape

from monitor.core.fingerprint import NotIJSONError, tool_fingerprint
from monitor.core.listing import annotations_of
from monitor.core.text import is_hidden, make_visible
from monitor.core.times import utc_parts, utc_text
from monitor.store.records import SEVERITIES


def _hidden_mark(char: str) -> Markup:
    code = f"U+{ord(char):04X}"
    name = unicodedata.name(char, "") if char != "\r" else "CARRIAGE RETURN"
    title = f"{code} {name}".strip() + " (invisible or direction-changing character)"
    return Markup('<mark class="hidden-char" title="{}">{}</mark>').format(title, code)


_ASCII_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _plain_ascii(text: str) -> bool:
    """Printable ASCII (and newlines, tabs) never needs marking: the fast path for most text."""
    return text.isascii() and _ASCII_CONTROL.search(text) is None


def visible(value: Any) -> Markup:
    """Escaped text with each invisible or bidi character shown as a marked `U+XXXX`."""
    if value is None:
        return Markup("")
    if isinstance(value, Markup):
        return value
    text = value if isinstance(value, str) else str(value)
    if _plain_ascii(text):
        return escape(text)
    return Markup("").join(_hidden_mark(c) if c == "\r" or is_hidden(c) else escape(c) for c in text)


def plain(value: Any) -> Markup:
    """For attribute values: hidden characters become `<U+XXXX>` text, then everything is escaped."""
    if value is None:
        return Markup("")
    text = value if isinstance(value, str) else str(value)
    return escape(text if _plain_ascii(text) else make_visible(text))


def finalize(value: Any) -> Any:
    """Applied to every `{{ expression }}`: strings are made visible; safe markup passes through."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return visible(value)


def format_time(value: datetime | None) -> Markup:
    """A `<time>` element reading as `monitor.core.times.utc_text` does; both renderings are digits
    and punctuation we produce, so no escaping."""
    if value is None:
        return Markup('<span class="muted">never</span>')
    day, clock = utc_parts(value)
    # A line may end between the day, the time and "UTC", never inside the day at its hyphens.
    return Markup(f'<time datetime="{day}T{clock}Z"><span class="day">{day}</span> {clock} UTC</time>')  # noqa: S704


def format_utc(value: datetime | None) -> str:
    """The instant as plain text (`utc_text`), where markup cannot go (an `<option>`, an attribute)."""
    return utc_text(value) if value is not None else "never"


ISO_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?")


def readable(value: Any) -> Any:
    """A recorded value as a page shows it: an ISO 8601 instant (as the audit log keeps a silence's
    end, for the API) reads as `utc_text`; anything else is itself."""
    if isinstance(value, str) and ISO_INSTANT.fullmatch(value):
        try:
            instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        return utc_text(instant if instant.tzinfo else instant.replace(tzinfo=UTC))
    return value


@pass_context
def format_when(context: Context, value: datetime | None) -> Markup:
    """The UTC time with how long ago it was, relative to the page's `now`."""
    now = context.get("now")
    if value is None or not isinstance(now, datetime):
        return format_time(value)  # a macro imported without the page's context
    relative = ago(value, now)
    return format_time(value) + Markup(' <span class="ago">({})</span>').format(relative)


def severity_badge(value: str | None) -> Markup:
    """A severity as a coloured label with the word in it: colour is never the only signal."""
    return Markup('<span class="sev sev-{}">{}</span>').format(severity_class(value), value or "")


def status_badge(value: str) -> Markup:
    kind = {"ok": "ok", "failing": "failing", "overdue": "failing"}.get(value, "none")
    return Markup('<span class="status status-{}">{}</span>').format(kind, value)


def fingerprint_code(value: str | None) -> Markup:
    if not value:
        return Markup('<span class="muted">none</span>')
    return Markup('<code class="fp" title="{}">{}</code>').format(plain(value), plain(value[:12]))


def iso(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else ""


def path_quote(value: str) -> str:
    """One URL path segment: slashes, `?`, `#` and everything non-ASCII percent-encoded."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def tool_href(server: str, tool: str) -> str:
    """The page of one tool. `.` and `..` are dot segments however they are encoded (`%2E` too), so
    those two names go in the query instead of the path."""
    if tool in (".", ".."):
        return f"/servers/{path_quote(server)}/tool?tool={path_quote(tool)}"
    return f"/servers/{path_quote(server)}/tools/{path_quote(tool)}"


JSON_SHOWN = 64 * 1024
"""Most characters of one JSON document (a definition, a schema) a page shows inline: a server may
send a schema of 100,000 properties, and the page must stay readable and a few MB at most."""


def json_block(value: Any, raw_href: str | None = None) -> Markup:
    """A `<pre>` of pretty JSON; past `JSON_SHOWN`, its start, a size note and a link to the raw JSON.

    Encoded piece by piece and stopped just past `JSON_SHOWN`: pretty-printing a 3 MB definition
    whole, to show its first 64 KB, cost a second of CPU per view.
    """
    text = _pretty_start(value, JSON_SHOWN + 1)
    if len(text) <= JSON_SHOWN:
        return Markup('<pre class="json">{}</pre>').format(visible(text))
    link = Markup(' <a href="{}">The whole document as JSON</a>.').format(raw_href) if raw_href else ""
    note = Markup('<p class="muted size-note">Collapsed: over {0} characters, the first {0} shown.{1}</p>')
    note = note.format(f"{JSON_SHOWN:,}", link)
    return Markup('<pre class="json">{}…</pre>{}').format(visible(text[:JSON_SHOWN]), note)


def _pretty_start(value: Any, length: int) -> str:
    """The first `length` characters (at least) of `pretty_json(value)`, without encoding the rest."""
    pieces: list[str] = []
    size = 0
    for piece in _pretty_pieces(value, 0, length):
        pieces.append(piece)
        size += len(piece)
        if size >= length:
            break
    return "".join(pieces)


def _pretty_pieces(value: Any, depth: int, length: int) -> Iterator[str]:
    """`pretty_json(value)` piece by piece. An object's members take at least 8 characters each, so
    no more than `length // 8` of them can be shown: only those smallest keys are sorted (sorting all
    100,000 keys of a hostile schema, to show a few hundred, cost most of a page view)."""
    if isinstance(value, dict) and value:
        shown = length // 8 + 1
        keys = sorted(value) if len(value) <= shown else heapq.nsmallest(shown, value)
        inner = "\n" + "  " * (depth + 1)
        for index, key in enumerate(keys):
            yield ("{" if index == 0 else ",") + inner + json.dumps(key, ensure_ascii=False) + ": "
            yield from _pretty_pieces(value[key], depth + 1, length)
        yield "\n" + "  " * depth + "}"
    elif isinstance(value, list) and value:
        inner = "\n" + "  " * (depth + 1)
        for index, item in enumerate(value):
            yield ("[" if index == 0 else ",") + inner
            yield from _pretty_pieces(item, depth + 1, length)
        yield "\n" + "  " * depth + "]"
    else:
        yield json.dumps(value, ensure_ascii=False)


def definition_href(server: str, definition: Mapping[str, Any], fingerprint: str | None = None) -> str | None:
    """Where a stored tool definition is served as raw JSON (by its content address): `fingerprint`,
    the stored address, when the page has it; else computed (None for one the first release stored
    that has no v2 address, a lone surrogate SQLite kept)."""
    if fingerprint is not None:
        return f"/servers/{path_quote(server)}/definitions/{fingerprint}"
    try:
        return f"/servers/{path_quote(server)}/definitions/{tool_fingerprint(definition)}"
    except NotIJSONError:
        return None


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def ago(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "never"
    seconds = (now - value).total_seconds()
    future = seconds < 0
    seconds = abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            amount = f"{int(seconds // size)} {unit}"
            break
    else:
        amount = f"{int(seconds)} s"
    return f"in {amount}" if future else f"{amount} ago"


def severity_class(value: str | None) -> str:
    return value if value in SEVERITIES else "unknown"


def as_text(value: Any) -> str:
    """A field that should be text: strings as they are, anything else (hostile or odd) as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else compact_json(value)


def tool_title(tool: Mapping[str, Any]) -> str:
    title = tool.get("title")
    if title is None:
        title = (annotations_of(tool) or {}).get("title")
    return as_text(title)


def marked_quote(detail: Any) -> Markup | None:
    """The sentence a content rule's finding quotes, with the span that raised it marked: escaped and
    made visible like all server text (None for a finding that quotes nothing)."""
    if not isinstance(detail, Mapping):
        return None
    text, span = detail.get("text"), detail.get("span")
    if not isinstance(text, str) or not isinstance(span, list) or len(span) != 2:
        return None
    start, end = span
    if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text)):
        return None
    first = max((m.end() for m in _SENTENCE_END.finditer(text, max(0, start - QUOTED), start)), default=None)
    after = _SENTENCE_END.search(text, end, min(len(text), end + QUOTED))
    first = first if first is not None else max(0, start - QUOTED // 3)
    last = after.start() + 1 if after is not None else min(len(text), end + QUOTED // 3)
    return Markup("{}<mark>{}</mark>{}").format(
        visible(text[first:start].lstrip()), visible(text[start:end]), visible(text[end:last].rstrip())
    )


QUOTED = 300
"""Characters shown on either side of a marked span, at most (the sentence, when shorter)."""
_SENTENCE_END = re.compile(r"[.!?。！？](?=\s|$)|\n")
