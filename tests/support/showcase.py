"""Every dashboard page with data in it, for the checks that look at all of them at once (tables at
every width, how times read, `tests/surface.py`).

`seed_showcase` records `support.incident`'s incident, then a server whose tools have a long name
and a long description and whose second client view differs, then what people do through the API
(`act`: an approval, a silence, a named token, an acknowledgement, host decisions), so the audit,
silences, decisions and client-view tables have rows too. `Showcase.pages` gives the URLs that show
each page route with its data; `NO_TABLE` the page routes left out, and why. `crawl` follows every link
from a set of pages, as a reader clicking through would.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from fastapi import FastAPI
from sqlalchemy import select

from monitor.config import ServerConfig
from monitor.core.clients import DEFAULT_PROFILE, ClientProfile
from monitor.core.fingerprint import CanonicalListing
from monitor.notify.alerts import Alerting
from monitor.store import Store
from monitor.store.models import Alert
from monitor.store.registration import sync_servers
from monitor.store.views import View
from support.incident import seed_incident
from support.polls import record_poll
from support.tools import tool
from support.web import app_routes
from support.world import QUERY, T0

LONG_TOOL = "summarize_incident_timeline_for_postmortem_review"
"""A tool name far wider than any table column it is shown in."""
LONG_DESCRIPTION = (
    "Summarizes every event of an incident, from the first page to the all-clear, into a timeline "
    "for the postmortem review; the template it fills is "
    "https://runbooks.example.com/postmortems/templates/incident-timeline-summary and it notes "
    "internationalization-considerations for teams in other time zones."
)
"""Prose with two words longer than most columns (a URL, a long compound) among short ones."""
BARE = ClientProfile(label="bare", name="bare-host", capabilities={})
"""A second client profile of `runbooks`, which is still shown its first version after the change."""


def runbooks(version: int) -> list[dict[str, Any]]:
    """The two versions of `runbooks`: in v2 the long-named tool stops being read-only and its
    description grows."""
    search = tool(
        "search_runbooks",
        description="Search the runbooks by service, team or keyword.",
        input_schema=QUERY,
        annotations={"readOnlyHint": True},
    )
    summary = tool(
        LONG_TOOL,
        description=LONG_DESCRIPTION if version == 1 else LONG_DESCRIPTION + " It also files the review.",
        input_schema=QUERY,
        annotations={"readOnlyHint": version == 1, "title": "Summarize an incident timeline"},
    )
    return [search, summary]


@dataclass(frozen=True)
class Showcase:
    store: Store
    alert_ids: dict[str, int]
    """`rule/tool-or-session` -> alert id, `support.incident`'s and `runbooks`'."""

    def pages(self) -> dict[str, list[str]]:
        """URLs that show each page route of the dashboard with rows in its tables, by route path."""
        revoked = self.alert_ids["read-only-revoked/lookup"]
        stale = self.alert_ids["session-stale/claude-code-7f2"]
        long_revoked = self.alert_ids[f"read-only-revoked/{LONG_TOOL}"]
        long_tool = quote(LONG_TOOL, safe="")
        return {
            "/": ["/"],
            "/servers/{name}": ["/servers/search", "/servers/runbooks"],
            "/servers/{name}/diff": [
                "/servers/search/diff?from=1&to=4",
                "/servers/runbooks/diff?from=1&to=2",
            ],
            "/servers/{name}/views/diff": ["/servers/runbooks/views/diff?view=bare"],
            "/servers/{name}/tools/{tool:toolname}": [
                "/servers/search/tools/lookup",
                f"/servers/runbooks/tools/{long_tool}",
            ],
            "/servers/{name}/tool": ["/servers/search/tool?tool=export"],
            "/alerts": ["/alerts", "/alerts?state=all"],
            "/alerts/{alert_id}": [f"/alerts/{revoked}", f"/alerts/{stale}", f"/alerts/{long_revoked}"],
            "/silences": ["/silences"],
            "/sessions": ["/sessions"],
            "/at": ["/at?server=search&time=2026-03-01T13:10", "/at?server=runbooks&time=2026-03-01T14:10"],
            "/search": [
                "/search?q=run",
                "/search?q=lookup&time=2026-03-01T13:10",
                "/search?q=summarize&time=2026-03-01T14:10",
            ],
            "/audit": ["/audit"],
        }


def seed_showcase(store: Store, policy: Alerting) -> Showcase:
    """The incident and `runbooks` in `store` (whose hooks must include `policy`); `act` then adds
    what people do, through the app."""
    seed_incident(store, policy)
    (runbooks_id,) = sync_servers(
        store, [ServerConfig(name="runbooks", transport="http", url="https://runbooks.example/mcp")], T0
    ).values()
    for version in (1, 2):
        listing = CanonicalListing.of(runbooks(version))
        bare = CanonicalListing.of(runbooks(1))  # the bare view is still shown v1
        record_poll(
            store,
            runbooks_id,
            listing,
            T0 + timedelta(hours=version),
            client=DEFAULT_PROFILE,
            views=(View(BARE, bare),),
        )
    with store.sessions() as session:
        rows = session.execute(select(Alert.id, Alert.rule, Alert.tool, Alert.session_id)).all()
    alert_ids = {
        f"{rule}/{tool_name or session_id or '-'}": ident for ident, rule, tool_name, session_id in rows
    }
    return Showcase(store, alert_ids)


def act(client: Any) -> None:
    """An approval, a silence, a named token, an acknowledgement and host hook decisions, through the
    API of `client` (signed in with the configured token). A request the app refuses is an error."""
    requests = [
        ("post", "/api/v1/servers/github/approvals", {"note": "reviewed the merge tool"}),
        ("post", "/api/v1/servers/tickets/approvals", {}),
        ("put", "/api/v1/servers/slack/approval", {"mode": "tofu"}),
        (
            "post",
            "/api/v1/silences",
            {"server": "slack", "rule": "tool-added", "duration": "2h", "reason": "planned release"},
        ),
        ("post", "/api/v1/tokens", {"name": "ci-gate", "role": "decide"}),
        ("post", "/api/v1/alerts/13/ack", {"note": "looking"}),
        ("post", "/api/v1/decisions", {"server": "github", "tool": "merge_pr"}),
        ("post", "/api/v1/decisions", {"server": "search", "tool": "search_docs"}),
        ("post", "/api/v1/decisions", {"server": "tickets", "tool": "open_ticket"}),
        ("post", "/api/v1/decisions", {"server": "runbooks", "tool": LONG_TOOL}),
        (
            "post",
            "/api/v1/hooks/claude-code",
            {
                "session_id": "s-1",
                "transcript_path": "/tmp/t.jsonl",
                "cwd": "/tmp",
                "hook_event_name": "PreToolUse",
                "tool_name": "mcp__github__merge_pr",
                "tool_input": {},
            },
        ),
    ]
    for method, path, body in requests:
        answer = client.request(method, path, json=body)
        if answer.status_code >= 300:
            raise AssertionError(f"{method.upper()} {path}: {answer.status_code} {answer.text[:300]}")


NO_TABLE = {
    "/login": "a form, no table",
    "/servers/{name}/approve": "a confirmation, no table",
    "/servers/{name}/definitions/{fingerprint}": "JSON, not a page",
    "/servers/{name}/polls/{attempt_id}/raw": "plain text, not a page",
}
"""Page routes `pages` leaves out, and why."""


def page_routes(app: FastAPI) -> set[str]:
    """The path of every dashboard page: the GET routes outside the API and the OpenAPI document."""
    return {
        path
        for method, path, in_schema in app_routes(app)
        if method == "get"
        and not in_schema
        and not path.startswith("/api/")
        and path not in ("/healthz", "/metrics")
    }


SKIPPED = ("/static/", "/logout", "/api/")
"""Paths `crawl` does not follow: files, signing out (it would end the crawl's session) and the API."""


def crawl(client: Any, starts: Iterable[str], limit: int = 400) -> dict[str, tuple[int, str]]:
    """Every page reachable from `starts` by links (GET only, the same origin, at most `limit`):
    path -> (status, HTML)."""
    found: dict[str, tuple[int, str]] = {}
    queue = deque(starts)
    seen = set(queue)
    while queue and len(found) < limit:
        path = queue.popleft()
        answer = client.get(path)
        found[path] = (answer.status_code, answer.text)
        if "text/html" not in answer.headers.get("content-type", ""):
            continue
        for link in re.findall(r'href="([^"#]*)', answer.text):
            target = urljoin(path, link.replace("&amp;", "&"))
            parts = urlsplit(target)
            if parts.netloc or not parts.path.startswith("/") or parts.path.startswith(SKIPPED):
                continue
            if target not in seen:
                seen.add(target)
                queue.append(target)
    return found
