"""CONTRIBUTING.md's walks, tried as written: a sink, a rule, a host adapter and a page, each added to a
scratch copy of the repository touching only what the guide says, then that copy's own tests and its
architecture check run on it.

Each walk writes exactly the files its section names and asserts that nothing else differs from the
repository, so a walk that needs one more file to work (a registry to edit, a settings class kept
elsewhere) fails here before it misleads a contributor.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("monitor", "web", "docs", "tests", "deploy", "migrations", "pyproject.toml", "alembic.ini")
IGNORED = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc", "npm")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leaked_processes")]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A copy of the repository's code, docs and tests to add to."""
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=IGNORED)
        else:
            shutil.copy2(source, copy / name)
    return copy


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def append(root: Path, name: str, text: str) -> None:
    path = root / name
    path.write_text(path.read_text(encoding="utf-8") + textwrap.dedent(text), encoding="utf-8")


def changed(copy: Path) -> set[str]:
    """The files of `copy` that are new or differ from the repository's."""
    found = set()
    for name in COPIED:
        for path in [copy / name] if (copy / name).is_file() else (copy / name).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts or ".hypothesis" in path.parts:
                continue
            relative = path.relative_to(copy)
            original = ROOT / relative
            if not original.exists() or not filecmp.cmp(path, original, shallow=False):
                found.add(relative.as_posix())
    return found


def run(copy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A Python command in the copy, importing the copy's `monitor`, not the repository's."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("DRIFT_MONITOR_TEST_PG_URL", None)  # the walks' own tests run on SQLite alone
    return subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def passes(copy: Path, *tests: str) -> None:
    """The copy's tests pass there, and so does its architecture check."""
    result = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-2000:]
    shape = run(copy, "deploy/architecture.py")
    assert shape.returncode == 0, shape.stderr


def test_add_a_sink(scratch: Path) -> None:
    """ "Add an alert sink": one module with its settings and body, its test, its docs."""
    write(
        scratch,
        {
            "monitor/sinks/teams.py": '''
                """Microsoft Teams (a Workflows webhook): one Adaptive Card message per alert event."""

                from __future__ import annotations

                from collections.abc import Mapping
                from typing import Any, Literal

                from pydantic import Field

                from monitor.core.text import make_visible
                from monitor.sinks.base import Sink, WebhookConfig, clip


                class TeamsWebhookConfig(WebhookConfig):
                    format: Literal["teams"] = "teams"
                    title_prefix: str = Field(default="drift-monitor", min_length=1, max_length=50)


                class Teams(Sink[TeamsWebhookConfig]):
                    format = "teams"
                    settings = TeamsWebhookConfig

                    @classmethod
                    def body(cls, payload: Mapping[str, Any], webhook: TeamsWebhookConfig) -> Any:
                        alert = payload["alert"]
                        said = f"[{alert['severity']}] {alert['rule']} on {alert['server']}"
                        text = clip(make_visible(f"{webhook.title_prefix}: {said}"), 500)
                        card = {
                            "type": "AdaptiveCard",
                            "version": "1.4",
                            "body": [{"type": "TextBlock", "text": text, "wrap": True}],
                            "actions": [{"type": "Action.OpenUrl", "title": "Open", "url": alert["url"]}],
                        }
                        kind = "application/vnd.microsoft.card.adaptive"
                        attachment = {"contentType": kind, "content": card}
                        return {"type": "message", "attachments": [attachment]}
            ''',
            "tests/test_sink_teams.py": r'''
                """The Teams sink through the real outbox, against a loopback receiver."""

                from __future__ import annotations

                import asyncio
                from datetime import UTC, datetime, timedelta
                from pathlib import Path

                import pytest
                from sqlalchemy import Engine
                from support import Receiver, read_only_flip, record_poll, webhook_secret

                from monitor.config import ConfigError, ServerConfig, load_config
                from monitor.notify.alerts import Alerting
                from monitor.notify.delivery import Deliverer
                from monitor.store import Store
                from monitor.store.registration import sync_servers

                KEY = b"k" * 32


                def test_a_flip_reaches_teams_as_a_card(
                    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                ) -> None:
                    monkeypatch.setenv("TEAMS_SECRET", webhook_secret(KEY))
                    with Receiver(KEY) as teams:
                        path = tmp_path / "monitor.toml"
                        path.write_text(
                            f'[[webhooks]]\nname = "t"\nformat = "teams"\nurl = "{teams.url}"\n'
                            'secret_env = "TEAMS_SECRET"\ntitle_prefix = "ops"\n'
                        )
                        config = load_config(path)
                        alerting = Alerting(config.webhooks, base_url="http://127.0.0.1:8000")
                        store = Store(engine, hooks=[alerting])
                        now = datetime.now(UTC) - timedelta(minutes=1)
                        server = ServerConfig(name="docs", transport="http", url="http://127.0.0.1:9/mcp")
                        server_id = sync_servers(store, [server], now)["docs"]
                        record_poll(store, server_id, read_only_flip(True), now)
                        record_poll(store, server_id, read_only_flip(False), now + timedelta(seconds=1))
                        deliverer = Deliverer(engine, config.webhooks)
                        while asyncio.run(deliverer.deliver_due()):
                            pass
                        message = teams.wait_event(lambda event: event.get("type") == "message")
                    card = message["attachments"][0]["content"]
                    assert card["body"][0]["text"] == "ops: [critical] read-only-revoked on docs"
                    assert card["actions"][0]["url"].startswith("http://127.0.0.1:8000/alerts/")


                def test_its_settings_are_checked(tmp_path: Path) -> None:
                    path = tmp_path / "monitor.toml"
                    path.write_text('[[webhooks]]\nname = "t"\nformat = "teams"\nurl = "http://a"\nx = 1\n')
                    with pytest.raises(ConfigError, match=r"webhooks\[0\] \('t'\): x: unknown key"):
                        load_config(path)
            ''',
        },
    )
    append(
        scratch,
        "docs/integrations.md",
        """
        ## Microsoft Teams

        `format = "teams"`: one Adaptive Card per alert event, `title_prefix` before each.
        """,
    )
    assert changed(scratch) == {"monitor/sinks/teams.py", "tests/test_sink_teams.py", "docs/integrations.md"}
    passes(scratch, "tests/test_sink_teams.py")


def test_add_a_rule(scratch: Path) -> None:
    """ "Add a rule": a decorated function in `content.py`, the generated docs and the contract's row,
    and its test; the catalog's own tests then pass with it."""
    append(
        scratch,
        "monitor/core/rules/content.py",
        """


        @rule("title-shouted", Severity.LOW, "The tool's title became all capitals.")
        def _title_shouted(rule: Rule, change: ToolChange) -> Iterator[Finding]:
            old, new = _text_field(change.old, "title"), _text_field(change.new, "title")
            if new and new != old and new.isupper() and not old.isupper():
                said = f"The title of {change.label()} is now shouted."
                yield rule.finding(change, "title", old, new, said)
        """,
    )
    docs = run(scratch, "-m", "monitor.cli", "rules", "--format", "markdown")
    assert docs.returncode == 0, docs.stderr
    (scratch / "docs" / "rules.md").write_text(docs.stdout, encoding="utf-8")
    contract = scratch / "docs" / "contract.md"
    text = contract.read_text(encoding="utf-8")
    row = "| tool-removed | low | a tool is gone |\n"
    assert row in text
    contract.write_text(text.replace(row, row + "| title-shouted | low | the title became all capitals |\n"))
    append(
        scratch,
        "tests/test_rules.py",
        """


        def test_a_shouted_title_is_found() -> None:
            from monitor.core.diff import diff_listings

            old = [tool("lookup", title="Look up")]
            found = diff_listings(old, [tool("lookup", title="LOOK UP")]).findings
            assert [f.rule for f in found if f.rule == "title-shouted"] == ["title-shouted"]
            assert not any(f.rule == "title-shouted" for f in diff_listings(old, old).findings)
        """,
    )
    assert changed(scratch) == {
        "monitor/core/rules/content.py",
        "docs/rules.md",
        "docs/contract.md",
        "tests/test_rules.py",
    }
    passes(scratch, "tests/test_rules.py", "tests/test_cli.py")
    rules = run(scratch, "-m", "monitor.cli", "rules")
    assert "title-shouted" in rules.stdout


def test_add_a_host_adapter(scratch: Path) -> None:
    """ "Add a host adapter": one module in `approvals/hosts/`, its test, its contract in the docs; the
    app then serves it, documents it, and answers a refused caller and an unreadable input as denies."""
    write(
        scratch,
        {
            "monitor/approvals/hosts/acme.py": '''
                """Acme Agent's pre-call hook: `{"server", "tool"}` in, `{"verdict": ...}` out."""

                from __future__ import annotations

                from typing import ClassVar, Literal

                from pydantic import BaseModel

                from monitor.approvals.hosts.base import (
                    BUSY_REASON,
                    Hook,
                    HostAdapter,
                    host_reason,
                    opinion,
                    text,
                )
                from monitor.approvals.names import exact_name
                from monitor.approvals.point import DecisionPoint
                from monitor.core.states import DecisionKind

                VERDICTS = {DecisionKind.ALLOW: "go", DecisionKind.ASK: "confirm", DecisionKind.DENY: "stop"}


                class AcmeIn(BaseModel):
                    server: str
                    tool: str


                class AcmeOut(BaseModel):
                    verdict: Literal["go", "stop", "confirm"]
                    why: str | None = None


                class Acme(HostAdapter):
                    host = "acme"
                    path = "/api/v1/hooks/acme"
                    endpoint = "acme_hook"
                    summary = "Acme Agent pre-call hook: stop, confirm or go"
                    input: ClassVar = AcmeIn
                    output: ClassVar = AcmeOut

                    def answer(self, point: DecisionPoint, hook: Hook) -> AcmeOut:
                        if isinstance(hook, str):
                            return AcmeOut(verdict="stop", why=host_reason(hook))
                        server, tool = text(hook.get("server")), text(hook.get("tool"))
                        if not server or not tool:
                            return AcmeOut(verdict="stop", why=host_reason("no server or tool named"))
                        found = point.decide_for_named_host(self.host, server, tool, normalise=exact_name)
                        said = opinion(point, found)
                        if said is None:
                            return AcmeOut(verdict="go")
                        return AcmeOut(verdict=VERDICTS[said[0]], why=host_reason(said[1]))

                    def busy(self, hook: Hook, decision: DecisionKind) -> AcmeOut:
                        return AcmeOut(verdict=VERDICTS[decision], why=host_reason(BUSY_REASON))
            ''',
            "tests/test_host_acme.py": '''
                """Acme Agent's hook over the app, as an attacker would try it."""

                from __future__ import annotations

                from support.web import TOKEN_ENV, web_client

                from monitor.config import Config, DecisionSettings, MonitorSettings
                from monitor.store import Store

                PATH = "/api/v1/hooks/acme"


                def test_acme_is_served_and_fails_closed(store: Store) -> None:
                    config = Config(
                        monitor=MonitorSettings(api_token_env=TOKEN_ENV),
                        decisions=DecisionSettings(unmonitored="deny"),
                        source="test",
                    )
                    with web_client(store, config) as client:
                        assert PATH in client.get("/api/v1/openapi.json").json()["paths"]
                        unknown = client.post(PATH, json={"server": "nobody", "tool": "wipe"})
                        assert unknown.status_code == 200 and unknown.json()["verdict"] == "stop"
                        garbage = client.post(PATH, content=b"{not json")
                        assert garbage.status_code == 200 and garbage.json()["verdict"] == "stop"
                    with web_client(store, config, auth=None) as stranger:
                        refused = stranger.post(PATH, json={"server": "nobody", "tool": "wipe"})
                        assert refused.status_code == 200 and refused.json()["verdict"] == "stop"
            ''',
        },
    )
    append(
        scratch,
        "docs/approvals.md",
        """
        ## Acme Agent

        `POST /api/v1/hooks/acme` with `{"server", "tool"}`; answers `go`, `confirm` or `stop`.
        """,
    )
    assert changed(scratch) == {
        "monitor/approvals/hosts/acme.py",
        "tests/test_host_acme.py",
        "docs/approvals.md",
    }
    passes(scratch, "tests/test_host_acme.py")


def test_add_a_page(scratch: Path) -> None:
    """ "Add a dashboard page": a router in a feature package, a template, the router in `PAGES`, its
    test; hostile server text arrives escaped and visible, under the same security headers."""
    write(
        scratch,
        {
            "monitor/servers/names.py": '''
                """Every server's name on one page."""

                from __future__ import annotations

                from fastapi import APIRouter, Depends, Request
                from fastapi.responses import HTMLResponse

                from monitor.identity.callers import page_read
                from monitor.store import queries
                from monitor.web.deps import ReadSession
                from monitor.web.rendering import render

                router = APIRouter(include_in_schema=False, dependencies=[Depends(page_read)])


                @router.get("/names", response_class=HTMLResponse)
                def names_page(request: Request, session: ReadSession) -> HTMLResponse:
                    names = queries.server_names(session)
                    return render(request, session, "names.html", nav="servers", names=names)
            ''',
            "web/templates/names.html": """
                {% extends "base.html" %}
                {% block title %}Names{% endblock %}
                {% block content %}
                <h1>Names</h1>
                <ul class="names">{% for name in names %}<li>{{ name }}</li>{% endfor %}</ul>
                {% endblock %}
            """,
            "tests/test_names_page.py": '''
                """The names page."""

                from __future__ import annotations

                from support.web import web_client

                from monitor.config import ServerConfig
                from monitor.store import Store
                from monitor.store.registration import sync_servers
                from support.world import T0


                def test_the_names_page_lists_every_server(store: Store) -> None:
                    docs = ServerConfig(name="docs", transport="http", url="http://127.0.0.1:9/")
                    sync_servers(store, [docs], T0)
                    with web_client(store, auth="session") as browser:
                        page = browser.get("/names")
                    assert page.status_code == 200
                    assert "<li>docs</li>" in page.text
                    assert "script-src" not in page.headers["content-security-policy"]
                    assert "default-src 'none'" in page.headers["content-security-policy"]
            ''',
        },
    )
    app = scratch / "monitor" / "app.py"
    source = app.read_text(encoding="utf-8")
    assert "from monitor.servers import overview, views\n" in source
    assert "        approval_pages,\n" in source
    listed = "from monitor.servers import names, overview, views\n"
    source = source.replace("from monitor.servers import overview, views\n", listed).replace(
        "        approval_pages,\n", "        approval_pages,\n        names,\n"
    )
    app.write_text(source, encoding="utf-8")
    assert changed(scratch) == {
        "monitor/servers/names.py",
        "web/templates/names.html",
        "monitor/app.py",
        "tests/test_names_page.py",
    }
    passes(scratch, "tests/test_names_page.py")
