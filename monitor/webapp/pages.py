"""The dashboard: server-rendered pages over the same read queries as the API, without JavaScript.

Everything a server sends is attacker-controlled text. Templates autoescape, and the environment's
`finalize` turns every string it prints into escaped text with invisible and direction-changing
characters replaced by a visible, marked code point; attributes use the `plain` filter instead.
Signing in stores a signed, expiring cookie derived from the API token; forms carry a signed
double-submit CSRF token and are refused from other origins.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from monitor.core.listing import HINT_DEFAULTS, annotations_of, effective_hints
from monitor.core.rules import Severity, schema_diff
from monitor.core.text import is_hidden, make_visible, word_diff
from monitor.store import queries
from monitor.webapp.api import INT32_MAX, WebContext, acknowledge_alert, context

SESSION_COOKIE = "dm_session"
CSRF_COOKIE = "dm_csrf"
SESSION_SECONDS = 12 * 3600
MAX_FORM_BYTES = 16 * 1024
HINT_LABELS = {
    "readOnlyHint": "read-only",
    "destructiveHint": "destructive",
    "idempotentHint": "idempotent",
    "openWorldHint": "open world",
}


# --- rendering untrusted text ----------------------------------------------------------------


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


def _finalize(value: Any) -> Any:
    """Applied to every `{{ expression }}`: strings are made visible; safe markup passes through."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return visible(value)


def format_time(value: datetime | None) -> Markup:
    """A `<time>` element; both renderings are digits and punctuation we produce, so no escaping."""
    if value is None:
        return Markup('<span class="muted">never</span>')
    utc = value.astimezone(UTC)
    text = f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d} {utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}"
    return Markup(f'<time datetime="{text.replace(" ", "T")}Z">{text} UTC</time>')  # noqa: S704


def severity_badge(value: str | None) -> Markup:
    """A severity as a coloured label with the word in it: colour is never the only signal."""
    return Markup('<span class="sev sev-{}">{}</span>').format(severity_class(value), value or "")


def status_badge(value: str) -> Markup:
    kind = {"ok": "ok", "failing": "failing"}.get(value, "none")
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
    return value if value in queries.SEVERITIES else "unknown"


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


def make_environment(templates: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        autoescape=True,
        undefined=StrictUndefined,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        visible=visible,
        plain=plain,
        ts=format_time,
        iso=iso,
        pathq=path_quote,
        pretty=pretty_json,
        compact=compact_json,
        sevclass=severity_class,
    )
    env.globals.update(
        severities=queries.SEVERITIES,
        hint_labels=HINT_LABELS,
        as_text=as_text,
        tool_title=tool_title,
        sev=severity_badge,
        status=status_badge,
        fp=fingerprint_code,
    )
    return env


# --- presentation helpers --------------------------------------------------------------------


@dataclass(frozen=True)
class HintBadge:
    hint: str
    label: str
    value: bool
    declared: bool
    applies: bool
    raw: Any


def hint_badges(tool: Mapping[str, Any]) -> list[HintBadge]:
    """The tool's effective hints, each marked declared or default, and n/a where hosts ignore it."""
    hints = effective_hints(tool)
    raw = annotations_of(tool) or {}
    return [
        HintBadge(h, HINT_LABELS[h], hints.get(h), h in hints.declared, hints.applies(h), raw.get(h))
        for h in HINT_DEFAULTS
    ]


@dataclass(frozen=True)
class HintChange:
    label: str
    old: HintBadge | None
    new: HintBadge | None

    @property
    def effective_changed(self) -> bool:
        if self.old is None or self.new is None:
            return True
        return (self.old.value, self.old.applies) != (self.new.value, self.new.applies)

    @property
    def raw_changed(self) -> bool:
        if self.old is None or self.new is None:
            return True
        return (
            compact_json(self.old.raw) != compact_json(self.new.raw) or self.old.declared != self.new.declared
        )


@dataclass(frozen=True)
class FieldChange:
    label: str
    old: Any
    new: Any


@dataclass
class ToolDiffView:
    """What a reviewer needs for one changed tool: findings, hints old -> new, text and schema diffs."""

    change: queries.ToolChangeView
    hints: list[HintChange]
    texts: list[FieldChange]
    description: list[tuple[str, str]] | None
    schemas: list[tuple[str, list[dict[str, Any]]]]
    others: list[dict[str, Any]]

    @property
    def only(self) -> Mapping[str, Any] | None:
        """The one definition of an added or removed tool, shown whole instead of as a diff."""
        if self.change.old is None or self.change.new is None:
            return self.change.new if self.change.new is not None else self.change.old
        return None

    @property
    def only_badges(self) -> list[HintBadge]:
        return hint_badges(self.only) if self.only is not None else []

    @property
    def status(self) -> str:
        if self.change.old is None and self.change.new is not None:
            return "added"
        if self.change.new is None and self.change.old is not None:
            return "removed"
        return "changed"


_SHOWN_KEYS = frozenset(
    {"name", "title", "description", "annotations", "inputSchema", "outputSchema", "_meta"}
)


def tool_diff_view(change: queries.ToolChangeView) -> ToolDiffView:
    old, new = change.old, change.new
    old_badges = {b.hint: b for b in hint_badges(old)} if old is not None else {}
    new_badges = {b.hint: b for b in hint_badges(new)} if new is not None else {}
    hints = []
    if old is not None and new is not None:
        for h in HINT_DEFAULTS:
            row = HintChange(HINT_LABELS[h], old_badges[h], new_badges[h])
            if row.effective_changed or row.raw_changed:
                hints.append(row)
    texts: list[FieldChange] = []
    for label in ("title", "annotations.title") if old is not None and new is not None else ():
        before = _title_field(old, label)
        after = _title_field(new, label)
        if compact_json(before) != compact_json(after):
            texts.append(FieldChange(label, before, after))
    description = None
    if (
        old is not None
        and new is not None
        and compact_json(old.get("description")) != compact_json(new.get("description"))
    ):
        description = _word_diff_of(change, old.get("description"), new.get("description"))
    schemas: list[tuple[str, list[dict[str, Any]]]] = []
    if old is not None and new is not None:
        for key in ("inputSchema", "outputSchema"):
            rows = schema_diff(old.get(key), new.get(key))
            if rows:
                schemas.append((key, rows))
        others = schema_diff(
            {k: v for k, v in old.items() if k not in _SHOWN_KEYS},
            {k: v for k, v in new.items() if k not in _SHOWN_KEYS},
        )
        others += schema_diff(_extra_annotations(old), _extra_annotations(new), "annotations")
        old_ann, new_ann = old.get("annotations"), new.get("annotations")
        if isinstance(old_ann, Mapping) != isinstance(new_ann, Mapping):
            others.append({"path": "annotations", "op": "changed", "old": old_ann, "new": new_ann})
    else:
        others = []
    return ToolDiffView(change, hints, texts, description, schemas, others)


def _title_field(tool: Mapping[str, Any] | None, path: str) -> Any:
    if tool is None:
        return None
    if path == "annotations.title":
        return (annotations_of(tool) or {}).get("title")
    return tool.get(path)


def _extra_annotations(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Annotation keys other than the four hints and the title (vendor extensions)."""
    return {k: v for k, v in (annotations_of(tool) or {}).items() if k not in HINT_DEFAULTS and k != "title"}


def _word_diff_of(change: queries.ToolChangeView, old: Any, new: Any) -> list[tuple[str, str]]:
    """The description-changed finding's word diff when present, else the same function run here."""
    for finding in change.findings:
        if finding.rule == "description-changed" and isinstance(finding.detail, Mapping):
            ops = finding.detail.get("word_diff")
            if isinstance(ops, list) and all(isinstance(op, list) and len(op) == 2 for op in ops):
                return [(str(op), str(text)) for op, text in ops]
    return list(word_diff(old if isinstance(old, str) else "", new if isinstance(new, str) else ""))


# --- sign-in and CSRF ------------------------------------------------------------------------


def _key(web: WebContext, purpose: str) -> bytes:
    """A key for one purpose, derived from the API token, so all monitor processes agree on it."""
    token = web.token or ""
    return hashlib.sha256(f"drift-monitor {purpose}\x00{token}".encode("utf-8", "surrogatepass")).digest()


def _sign(web: WebContext, purpose: str, value: str) -> str:
    return hmac.new(_key(web, purpose), value.encode(), hashlib.sha256).hexdigest()


def session_cookie_value(web: WebContext, now: float) -> str:
    expires = str(int(now) + SESSION_SECONDS)
    return f"{expires}.{_sign(web, 'session', expires)}"


def signed_in(web: WebContext, request: Request) -> bool:
    """A valid bearer token, or an unexpired session cookie signed with a key from the token."""
    if web.token is None:
        return False
    if web.bearer_ok(request):
        return True
    cookie = request.cookies.get(SESSION_COOKIE, "")
    expires, _, signature = cookie.partition(".")
    if not expires.isdigit() or not signature:
        return False
    if not hmac.compare_digest(signature.encode(), _sign(web, "session", expires).encode()):
        return False
    return int(expires) > time.time()


def _csrf_valid(web: WebContext, value: str) -> bool:
    nonce, _, signature = value.partition(".")
    return bool(nonce) and hmac.compare_digest(signature.encode(), _sign(web, "csrf", nonce).encode())


def _csrf_token(web: WebContext, request: Request) -> tuple[str, bool]:
    """The request's CSRF token (reused while valid) and whether it must be set as a cookie."""
    current = request.cookies.get(CSRF_COOKIE, "")
    if current and _csrf_valid(web, current):
        return current, False
    nonce = secrets.token_urlsafe(24)
    return f"{nonce}.{_sign(web, 'csrf', nonce)}", True


class FormRefused(Exception):
    """A form post that fails the CSRF or origin check: answered 403, never acted on."""


async def read_form(web: WebContext, request: Request) -> dict[str, str]:
    """The url-encoded form, after the same-origin and double-submit CSRF checks."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise FormRefused("cross-site form posts are refused")
    origin = request.headers.get("origin")
    # "null" is what privacy settings and sandboxed frames send; the CSRF token still has to match.
    if origin is not None and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise FormRefused("the form was posted from another origin")
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_FORM_BYTES):
        raise FormRefused("the form is too large")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise FormRefused("the form is too large")
    fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = fields.get("csrf_token", "")
    if not cookie or not given or not hmac.compare_digest(cookie.encode(), given.encode("utf-8", "replace")):
        raise FormRefused(
            "the form's CSRF token is missing or does not match (reload the page and try again)"
        )
    if not _csrf_valid(web, cookie):
        raise FormRefused("the CSRF token is not valid (reload the page and try again)")
    return fields


def safe_next(value: str | None, default: str = "/") -> str:
    """Only local paths: no scheme, no host, no `//` or backslash tricks, no line breaks."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if any(c in value for c in "\r\n\\") or any(is_hidden(c) for c in value):
        return default
    return value


class LoginRequired(Exception):
    """A page was asked for without a sign-in while a token is configured: redirect to /login."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def _request_path(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def require_viewer(request: Request) -> None:
    """Pages are open without a token; with one, they need a sign-in (cookie) or the bearer token."""
    web = context(request)
    if web.token is not None and not signed_in(web, request):
        raise LoginRequired(_request_path(request))


# --- rendering -------------------------------------------------------------------------------


def render(request: Request, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    web = context(request)
    env: Environment = request.app.state.templates
    token, new_cookie = _csrf_token(web, request)
    try:
        with web.store.sessions() as session:
            alert_counts: dict[str, int] | None = queries.alert_state_counts(session)
    except SQLAlchemyError:
        alert_counts = None  # an error page must render even when the database is down
    page = env.get_template(template).render(
        request=request,
        csrf_token=token,
        auth_enabled=web.token is not None,
        signed_in=signed_in(web, request),
        token_env=web.token_env,
        now=web.now(),
        ago=lambda value: ago(value, web.now()),
        static_version=request.app.state.static_version,
        open_alerts=alert_counts,
        **values,
    )
    # Every string went through `finalize`; "replace" only guards against a template bug.
    response = HTMLResponse(page.encode("utf-8", "replace"), status_code=status_code)
    if new_cookie:
        response.set_cookie(
            CSRF_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
    return response


def error_page(request: Request, status_code: int, message: str) -> HTMLResponse:
    return render(request, "error.html", status_code, status=status_code, message=message, nav="")


router = APIRouter(include_in_schema=False, dependencies=[Depends(require_viewer)])
open_router = APIRouter(include_in_schema=False)
"""The sign-in pages, reachable before signing in."""


def _open_alert_total(web: WebContext) -> int:
    with web.store.sessions() as session:
        return queries.alert_state_counts(session)["open"]


def _severity(value: str | None) -> Severity | None:
    if not value:
        return None
    try:
        return Severity.parse(value)
    except ValueError:
        raise HTTPException(422, f"min_severity: {value!r} is not a severity") from None


def _int(value: str | None, name: str, *, minimum: int = 1) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or not minimum <= int(value) <= INT32_MAX:
        raise HTTPException(422, f"{name}: expected a whole number from {minimum}")
    return int(value)


@router.get("/", response_class=HTMLResponse)
def overview(request: Request, min_severity: str | None = None) -> HTMLResponse:
    web = context(request)
    severity = _severity(min_severity)
    with web.store.sessions() as session:
        rows = queries.servers(session)
        changes = queries.changes(session, min_severity=severity, limit=50)
        states = queries.alert_state_counts(session)
    if severity is not None:
        rows = [r for r in rows if r.worst_open_rank >= severity.rank]
    rows.sort(key=lambda r: (-r.worst_open_rank, r.status != "failing", r.name))
    totals = {s: sum(r.open_alerts.get(s, 0) for r in rows) for s in queries.SEVERITIES}
    status_counts = {
        status: sum(1 for r in rows if r.status == status) for status in ("ok", "failing", "never polled")
    }
    return render(
        request,
        "overview.html",
        nav="overview",
        servers=rows,
        changes=changes,
        min_severity=severity.value if severity else "",
        totals=totals,
        status_counts=status_counts,
        states=states,
    )


def _server_or_404(request: Request, name: str) -> queries.ServerRow:
    web = context(request)
    row = None
    if "\x00" not in name and len(name) <= 200:
        with web.store.sessions() as session:
            row = queries.server(session, name)
    if row is None:
        raise HTTPException(404, f"no server named {make_visible(name)!r}")
    return row


@router.get("/servers/{name}", response_class=HTMLResponse)
def server_page(request: Request, name: str, before: str | None = None) -> HTMLResponse:
    web = context(request)
    server = _server_or_404(request, name)
    cursor = _int(before, "before")
    limit = 50
    with web.store.sessions() as session:
        versions = queries.snapshots(session, server.id, limit=limit + 1, before=cursor)
        summaries = queries.version_summaries(session, [v.id for v in versions])
        tools = queries.listing_tools(session, server.current.listing_id) if server.current else []
        alerts = queries.alerts(session, state="open", server_id=server.id, limit=20)
        attempts = queries.recent_attempts(session, server.id)
    more = len(versions) > limit
    versions = versions[:limit]
    tools.sort(key=lambda t: str(t.get("name")))
    alerts.sort(key=lambda a: (-Severity(a.severity).rank, -a.id))
    return render(
        request,
        "server.html",
        nav="overview",
        server=server,
        versions=versions,
        summaries={sid: (count, queries.SEVERITIES[::-1][rank]) for sid, (count, rank) in summaries.items()},
        older=versions[-1].version if more else None,
        tools=[(tool, hint_badges(tool)) for tool in tools],
        alerts=alerts,
        attempts=attempts,
    )


@router.get("/servers/{name}/diff", response_class=HTMLResponse)
def diff_page(request: Request, name: str) -> HTMLResponse:
    web = context(request)
    server = _server_or_404(request, name)
    params = request.query_params
    if server.current is None:
        return render(request, "diff.html", nav="overview", server=server, diff=None, tools=[], choices=[])
    new_version = _int(params.get("to"), "to") or server.current.version
    old_version = _int(params.get("from"), "from", minimum=1) or max(1, new_version - 1)
    with web.store.sessions() as session:
        result = queries.diff(session, server.id, old_version, new_version)
        choices = queries.snapshots(session, server.id, limit=500)
    if result is None:
        raise HTTPException(404, f"server {name!r} has no version {old_version} or {new_version}")
    return render(
        request,
        "diff.html",
        nav="overview",
        server=server,
        diff=result,
        tools=[tool_diff_view(t) for t in result.tools],
        choices=choices,
    )


@router.get("/servers/{name}/tools/{tool:path}", response_class=HTMLResponse)
def tool_page(request: Request, name: str, tool: str) -> HTMLResponse:
    web = context(request)
    server = _server_or_404(request, name)
    runs: list[queries.ToolVersion] = []
    if "\x00" not in tool:
        with web.store.sessions() as session:
            runs = queries.tool_history(session, server.id, tool)
    if not runs:
        raise HTTPException(404, f"server {name!r} never listed a tool named {make_visible(tool)!r}")
    steps = []
    previous: queries.ToolVersion | None = None
    for run in runs:
        change = queries.ToolChangeView(tool, previous.definition if previous else None, run.definition)
        steps.append((run, tool_diff_view(change) if previous is not None else None))
        previous = run
    steps.reverse()
    return render(
        request,
        "tool.html",
        nav="overview",
        server=server,
        tool=tool,
        steps=steps,
        badges=hint_badges(runs[-1].definition) if runs[-1].definition is not None else None,
    )


@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(request: Request, state: str = "open", before: str | None = None) -> HTMLResponse:
    web = context(request)
    if state not in ("open", "acknowledged", "resolved", "all"):
        raise HTTPException(422, "state: expected open, acknowledged, resolved or all")
    cursor = _int(before, "before")
    limit = 100
    with web.store.sessions() as session:
        rows = queries.alerts(
            session,
            state=None if state == "all" else state,  # type: ignore[arg-type]
            limit=limit + 1,
            before=cursor,
        )
        states = queries.alert_state_counts(session)
    more = len(rows) > limit
    rows = rows[:limit]
    next_query = urlencode({"state": state, **({"before": str(cursor)} if cursor else {})})
    return render(
        request,
        "alerts.html",
        nav="alerts",
        alerts=rows,
        state=state,
        states=states,
        older=rows[-1].id if more else None,
        can_write=web.token is not None and signed_in(web, request),
        here=f"/alerts?{next_query}",
        flash=request.query_params.get("done", ""),
    )


@router.post("/alerts/{alert_id}/ack", response_class=HTMLResponse)
async def acknowledge(request: Request, alert_id: int) -> Response:
    web = context(request)
    try:
        fields = await read_form(web, request)
    except FormRefused as exc:
        return error_page(request, 403, str(exc))
    if web.token is None:
        return error_page(
            request,
            403,
            f"no API token configured: set the environment variable {web.token_env} to allow changes",
        )
    if not signed_in(web, request):
        return error_page(request, 403, "sign in to acknowledge alerts")
    if not 1 <= alert_id <= INT32_MAX:
        raise HTTPException(404, f"no alert {alert_id}")
    row = await run_in_threadpool(acknowledge_alert, web, alert_id)
    if row is None:
        raise HTTPException(404, f"no alert {alert_id}")
    target = safe_next(fields.get("next"), "/alerts")
    separator = "&" if "?" in target else "?"
    return RedirectResponse(f"{target}{separator}done={row.id}", status_code=303)


@router.get("/sessions", response_class=HTMLResponse)
def sessions_page(request: Request, stale: str | None = None) -> HTMLResponse:
    from monitor.notify import sessions

    web = context(request)
    stale_only = stale in ("1", "true", "on")
    with web.store.sessions() as session:
        views = sessions.list_sessions(session, stale_only=stale_only, now=web.now(), grace=web.session_grace)
    return render(request, "sessions.html", nav="sessions", sessions=views, stale_only=stale_only)


def _parse_instant(value: str) -> datetime:
    """`2026-03-01T12:00`, with seconds or an offset; a time without an offset is read as UTC."""
    text = value.strip().replace(" ", "T")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise HTTPException(
            422, f"time: {value!r} is not an ISO 8601 time (e.g. 2026-03-01T12:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        raise HTTPException(422, "time: outside the representable years") from None


@router.get("/at", response_class=HTMLResponse)
def at_page(request: Request, server: str | None = None, time: str | None = None) -> HTMLResponse:
    web = context(request)
    with web.store.sessions() as session:
        names = queries.server_names(session)
    found = None
    tools: list[tuple[dict[str, Any], list[HintBadge]]] = []
    instant = _parse_instant(time) if time else None
    message = ""
    if server and instant is not None:
        row = _server_or_404(request, server)
        with web.store.sessions() as session:
            found = queries.snapshot_at(session, row.name, instant)
            if found is not None:
                listing = queries.listing_tools(session, found.snapshot.listing_id)
                listing.sort(key=lambda t: str(t.get("name")))
                tools = [(tool, hint_badges(tool)) for tool in listing]
            else:
                first = queries.first_snapshot_time(session, row.id)
                message = (
                    f"{row.name} had no recorded listing at that time; its first version was seen "
                    f"{iso(first)}."
                    if first
                    else f"{row.name} has no recorded listing yet."
                )
    return render(
        request,
        "at.html",
        nav="at",
        names=names,
        server=server or "",
        time_value=instant.strftime("%Y-%m-%dT%H:%M:%S") if instant else "",
        instant=instant,
        found=found,
        tools=tools,
        message=message,
    )


@open_router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str | None = None) -> HTMLResponse:
    web = context(request)
    return render(
        request, "login.html", nav="", next_path=safe_next(next), error="", configured=web.token is not None
    )


@open_router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    web = context(request)
    try:
        fields = await read_form(web, request)
    except FormRefused as exc:
        return error_page(request, 403, str(exc))
    next_path = safe_next(fields.get("next"))
    if web.token is None:
        return render(
            request,
            "login.html",
            403,
            nav="",
            next_path=next_path,
            configured=False,
            error="No API token is configured, so there is nothing to sign in with.",
        )
    given = fields.get("token", "").strip()
    if not hmac.compare_digest(given.encode("utf-8", "replace"), web.token.encode("utf-8")):
        return render(
            request,
            "login.html",
            401,
            nav="",
            next_path=next_path,
            configured=True,
            error="That is not the configured API token.",
        )
    response = RedirectResponse(next_path, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_cookie_value(web, time.time()),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@open_router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    web = context(request)
    try:
        await read_form(web, request)
    except FormRefused as exc:
        return error_page(request, 403, str(exc))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
