"""One page per alert (`/alerts/{id}`, every webhook's `url`), and acknowledging and resolving it with
who and why, through the pages and the API, on the real store and app."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from support import read_only_flip, record_poll, webhook_secret
from support.web import add_token, bearer, hold_session, page_text, session_value, web_client
from support.world import T0

from monitor.config import ServerConfig
from monitor.core.findings import Severity
from monitor.notify.alerts import Alerting
from monitor.sinks.base import WebhookConfig
from monitor.store import Store
from monitor.store.models import Alert, WebhookDelivery
from monitor.store.registration import sync_servers

SECRET_ENV = "TEST_ALERT_PAGE_SECRET"


def listing(read_only: bool) -> list[dict[str, object]]:
    return read_only_flip(read_only, description="Purge a tenant.")


@pytest.fixture
def alerted(store: Store, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A server whose polls opened a critical tool alert and a server-unreachable alert, with webhooks."""
    monkeypatch.setenv(SECRET_ENV, webhook_secret(b"alert page key"))
    webhook = WebhookConfig(
        name="ops", url="http://127.0.0.1:9/hook", secret_env=SECRET_ENV, min_severity=Severity.HIGH
    )
    alerting = Alerting([webhook], base_url="http://testserver")
    store.hooks.append(alerting)
    server_id = sync_servers(
        store, [ServerConfig(name="tenants", transport="http", url="http://127.0.0.1:9/")], T0
    )["tenants"]
    record_poll(store, server_id, listing(True), T0)
    record_poll(store, server_id, listing(False), T0 + timedelta(minutes=1))
    for minute in range(2, 5):
        at = T0 + timedelta(minutes=minute)
        store.record_failure(server_id, "connect", "connection refused", started_at=at, finished_at=at)
    return store


@pytest.fixture
def browser(alerted: Store) -> Iterator[TestClient]:
    """A browser signed in as dana, an approver (a named token: the actor of what she does)."""
    add_token(alerted, "dana", "approver")
    (alerting,) = [hook for hook in alerted.hooks if isinstance(hook, Alerting)]
    with web_client(alerted, auth=None, follow_redirects=False, alerting=alerting) as client:
        hold_session(client, session_value(client.app, "dana"))  # type: ignore[arg-type]
        yield client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, html[:300]
    return match.group(1)


def webhook_urls(store: Store) -> dict[str, str]:
    with store.sessions() as session:
        bodies = session.scalars(select(WebhookDelivery.body)).all()
    alerts = [json.loads(body)["alert"] for body in bodies]
    return {alert["rule"]: alert["url"] for alert in alerts}


def test_every_webhook_url_answers_with_the_alerts_page_when_signed_in(
    alerted: Store, browser: TestClient
) -> None:
    urls = webhook_urls(alerted)
    assert set(urls) == {"read-only-revoked", "server-unreachable"}
    for rule, url in urls.items():
        path = urlsplit(url).path
        browser.cookies.delete("dm_session")
        assert browser.get(path).status_code == 303, "a sign-in first"
        hold_session(browser, session_value(browser.app))
        page = browser.get(path)
        assert page.status_code == 200, (rule, page.text[:300])
        assert f"<code>{rule}</code>" in page.text
        assert "Webhook deliveries" in page.text and "Timeline" in page.text
    revoked = browser.get(urlsplit(urls["read-only-revoked"]).path).text
    assert 'href="/servers/tenants/diff?from=1&amp;to=2"' in revoked, "the diff that caused it"
    assert "purge_tenant" in revoked and "critical" in revoked
    unreachable = browser.get(urlsplit(urls["server-unreachable"]).path).text
    assert "not a listing change" in unreachable
    assert browser.get("/alerts/999999").status_code == 404


def test_acknowledge_with_who_and_a_note_then_resolve_by_hand_on_the_page(
    alerted: Store, browser: TestClient
) -> None:
    with alerted.sessions() as session:
        alert_id = session.scalars(select(Alert.id).where(Alert.rule == "read-only-revoked")).one()
    page = browser.get(f"/alerts/{alert_id}")
    token = csrf_of(page.text)
    assert 'name="by"' not in page.text, "who acts is the signed-in person, not a field"
    done = browser.post(
        f"/alerts/{alert_id}/ack",
        data={
            "csrf_token": token,
            "next": f"/alerts/{alert_id}",
            "by": "mallory",
            "note": "Rolling back <v2>",
        },
    )
    assert done.status_code == 303 and done.headers["location"] == f"/alerts/{alert_id}"
    shown = browser.get(done.headers["location"]).text
    assert "acknowledged by dana" in shown and "Rolling back &lt;v2&gt;" in shown
    assert "mallory" not in shown

    resolved = browser.post(f"/alerts/{alert_id}/resolve", data={"csrf_token": token, "note": "rolled back"})
    assert resolved.status_code == 303
    shown = browser.get(resolved.headers["location"]).text
    assert "resolved by dana" in shown and "rolled back" in shown and "Act on it" not in shown
    with alerted.sessions() as session:
        alert = session.get_one(Alert, alert_id)
        assert (alert.state, alert.resolved_by, alert.resolve_note) == ("resolved", "dana", "rolled back")

    again = browser.post(f"/alerts/{alert_id}/ack", data={"csrf_token": token})
    assert again.status_code == 409 and "nothing to acknowledge" in again.text
    assert browser.post(f"/alerts/{alert_id}/resolve", data={"csrf_token": token}).status_code == 409


def test_the_api_shows_one_alert_and_refuses_to_acknowledge_a_resolved_one(alerted: Store) -> None:
    """The actor is the token's name; an earlier release's `by` is kept as text in the note."""
    sam = bearer(add_token(alerted, "sam", "responder"))
    with web_client(alerted, auth=None) as client:
        (open_alert,) = [
            a
            for a in client.get("/api/v1/alerts", headers=sam).json()["items"]
            if a["rule"] == "read-only-revoked"
        ]
        acked = client.post(
            f"/api/v1/alerts/{open_alert['id']}/ack", json={"by": "kim", "note": "looking"}, headers=sam
        )
        assert acked.status_code == 200
        assert (acked.json()["state"], acked.json()["acknowledged_by"], acked.json()["ack_note"]) == (
            "acknowledged",
            "sam",
            "for kim: looking",
        )
        client.headers.update(sam)
        detail = client.get(f"/api/v1/alerts/{open_alert['id']}").json()
        assert detail["alert"]["id"] == open_alert["id"]
        assert [f["rule"] for f in detail["findings"]] == ["read-only-revoked"]
        assert [(d["webhook"], d["event_type"], d["state"]) for d in detail["deliveries"]] == [
            ("ops", "alert.opened", "pending")
        ]
        resolved = client.post(f"/api/v1/alerts/{open_alert['id']}/resolve", json={"note": "done"})
        assert resolved.status_code == 200 and resolved.json()["resolved_by"] == "sam"
        conflict = client.post(f"/api/v1/alerts/{open_alert['id']}/ack")
        assert conflict.status_code == 409 and "resolved" in conflict.json()["detail"]
        assert client.post(f"/api/v1/alerts/{open_alert['id']}/resolve").status_code == 409
        assert client.get("/api/v1/alerts/999999").status_code == 404
        assert client.post("/api/v1/alerts/1/ack", json={"by": "x", "extra": 1}).status_code == 422


def test_an_acknowledged_critical_stays_on_the_overview_and_the_server_page(
    alerted: Store, browser: TestClient
) -> None:
    with alerted.sessions() as session:
        alert_id = session.scalars(select(Alert.id).where(Alert.rule == "read-only-revoked")).one()
    token = csrf_of(browser.get(f"/alerts/{alert_id}").text)
    acked = browser.post(f"/alerts/{alert_id}/ack", data={"csrf_token": token})
    assert acked.status_code == 303
    overview = browser.get("/").text
    assert "1 acknowledged" in overview and "1 critical" in overview  # the server's row and the tile
    assert "tenants" in browser.get("/?min_severity=critical").text, "still among the critical servers"
    server = browser.get("/servers/tenants").text
    assert f'href="/alerts/{alert_id}"' in server and "acknowledged by dana" in server


def form_fields(html: str, action: str) -> dict[str, str]:
    """The fields the form posting to `action` sends (its hidden inputs, as a browser would)."""
    start = html.index(f'action="{action}"')
    form = html[start : html.index("</form>", start)]
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))


def test_approving_from_an_alert_resolves_it_and_comes_back_to_it(
    alerted: Store, browser: TestClient
) -> None:
    """The alert page of a tool change offers approval of the tool as it now stands. Must hold: the
    form approves that version of that tool and the alert resolves; the person then lands on the
    alert's page again (so does Cancel), whose banner says what was approved and by whom; a
    server-level alert has no form."""
    with alerted.sessions() as session:
        revoked = session.scalars(select(Alert.id).where(Alert.rule == "read-only-revoked")).one()
        unreachable = session.scalars(select(Alert.id).where(Alert.rule == "server-unreachable")).one()
    page = browser.get(f"/alerts/{revoked}").text
    assert "Approve purge_tenant as in v2" in page
    assert "/approve" not in browser.get(f"/alerts/{unreachable}").text
    action = "/servers/tenants/approve?tool=purge_tenant"
    form = form_fields(page, action)
    assert (form["back"], form["alert"], form["version"]) == ("alert", str(revoked), "2")
    posted = browser.post(action, data=form)
    assert posted.status_code == 303, "approving asks first, on a page of its own"
    assert posted.headers["location"].startswith(f"{action}&version=2&")
    asked = browser.get(posted.headers["location"])
    assert asked.status_code == 200
    assert "Approve — as dana" in asked.text and f'href="/alerts/{revoked}"' in asked.text
    assert f'<a href="/alerts/{revoked}">Cancel</a>' in asked.text, "Cancel goes back to the alert"
    assert f'href="/alerts/{unreachable}"' not in asked.text, "the confirmation lists what it resolves"
    with alerted.sessions() as session:
        assert session.get_one(Alert, revoked).state == "open", "nothing happened before the confirmation"
    confirm = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', asked.text))
    assert confirm["confirm"] == "yes" and confirm["version"] == "2"
    approved = browser.post(action, data=confirm)
    assert approved.status_code == 303, approved.text
    assert approved.headers["location"] == f"/alerts/{revoked}", "back on the alert's page"
    landed = browser.get(approved.headers["location"]).text
    banner = re.search(r'<p class="flash" role="status">(.*?)</p>', landed)
    assert banner is not None
    assert page_text(banner.group(1)) == (
        f"dana approved 'purge_tenant' of tenants as in v2, resolving alert(s) #{revoked}."
    )
    assert "approved by dana as in v2" in page_text(landed), "and the alert says why it ended"
    with alerted.sessions() as session:
        alert = session.get_one(Alert, revoked)
        assert (alert.state, alert.resolved_by, alert.resolve_note) == (
            "resolved",
            "dana",
            "approved as in v2",
        )
        assert session.get_one(Alert, unreachable).state != "resolved"
        resolved = [
            json.loads(body)
            for body in session.scalars(select(WebhookDelivery.body))
            if json.loads(body)["type"] == "alert.resolved"
        ]
    assert [(r["alert"]["id"], r["by"], r["note"]) for r in resolved] == [
        (revoked, "dana", "approved as in v2")
    ]
    shown = browser.get(f"/alerts/{revoked}").text
    assert "approved by dana as in v2" in shown and "the condition cleared" not in shown


def resolved_bodies(store: Store) -> dict[str, dict[str, object]]:
    """The `alert.resolved` webhook body of each rule."""
    with store.sessions() as session:
        bodies = session.scalars(
            select(WebhookDelivery.body).where(WebhookDelivery.event_type == "alert.resolved")
        ).all()
    return {json.loads(body)["alert"]["rule"]: json.loads(body) for body in bodies}


def test_silenced_alerts_show_it_and_every_resolution_gives_its_cause(
    alerted: Store, browser: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A silence over an open alert marks it (API, list, page, server page); a silence made with
    `resolve_alerts` resolves it, its cause the silence; an approval's cause is the approval; each
    cause on the page, the timeline, the webhook body and the log line."""
    sam = bearer(add_token(alerted, "sam", "responder"))
    ann = bearer(add_token(alerted, "ann", "approver"))
    (alerting,) = [hook for hook in alerted.hooks if isinstance(hook, Alerting)]
    with web_client(alerted, auth=None, alerting=alerting) as client:
        muted = {
            "server": "tenants",
            "rule": "server-unreachable",
            "duration": "2h",
            "reason": "planned outage",
        }
        assert client.post("/api/v1/silences", json=muted, headers=sam).status_code == 201
        items = client.get("/api/v1/alerts", params={"state": "unresolved"}, headers=sam).json()["items"]
        by_rule = {a["rule"]: a for a in items}
        assert by_rule["server-unreachable"]["silenced_by"] == "sam"
        assert by_rule["server-unreachable"]["silenced_until"] is not None
        assert by_rule["read-only-revoked"]["silenced_until"] is None
        unreachable = by_rule["server-unreachable"]["id"]
        for path in ("/alerts", f"/alerts/{unreachable}", "/servers/tenants"):
            assert "state-silenced" in browser.get(path).text, path

        with caplog.at_level("INFO", logger="drift_monitor.alerts"):
            silenced = client.post("/api/v1/silences", json={**muted, "resolve_alerts": True}, headers=sam)
            assert silenced.status_code == 201
            approved = client.post(
                "/api/v1/servers/tenants/approvals",
                json={
                    "version": 2,
                    "tools": ["purge_tenant"],
                    "note": "rolled out on purpose",
                    "resolve_alerts": True,
                },
                headers=ann,
            )
            assert approved.status_code in (200, 201), approved.text
        done = {
            a["rule"]: a
            for a in client.get("/api/v1/alerts", params={"state": "resolved"}, headers=sam).json()["items"]
        }
    assert done["server-unreachable"]["resolve_cause"] == "silenced"
    assert done["server-unreachable"]["resolution"].startswith("silenced by sam until 20")
    assert done["server-unreachable"]["resolution"].endswith(": planned outage")
    assert done["read-only-revoked"]["resolve_cause"] == "approved"
    assert done["read-only-revoked"]["resolution"] == "approved by ann as in v2: rolled out on purpose"

    bodies = resolved_bodies(alerted)
    assert bodies["server-unreachable"]["cause"] == done["server-unreachable"]["resolution"]
    assert bodies["read-only-revoked"]["cause"] == "approved by ann as in v2: rolled out on purpose"
    logged = [r.getMessage() for r in caplog.records if " resolved" in r.getMessage()]
    assert any("approved by ann as in v2" in line for line in logged), logged
    assert any("silenced by sam until" in line for line in logged), logged

    page = browser.get(f"/alerts/{done['read-only-revoked']['id']}").text
    assert page.count("approved by ann as in v2: rolled out on purpose") == 2, "the facts and the timeline"
    assert "the condition cleared" not in page


def test_a_cleared_condition_says_so_everywhere(alerted: Store, browser: TestClient) -> None:
    with alerted.sessions() as session:
        server_id = session.scalars(select(Alert.server_id)).first()
        unreachable = session.scalars(select(Alert.id).where(Alert.rule == "server-unreachable")).one()
    assert server_id is not None
    record_poll(alerted, server_id, listing(False), T0 + timedelta(minutes=6))
    assert resolved_bodies(alerted)["server-unreachable"]["cause"] == "the condition cleared"
    page = browser.get(f"/alerts/{unreachable}").text
    assert page.count("the condition cleared") == 2, "the facts and the timeline"


def test_the_alert_page_answers_what_changed_what_hosts_get_and_acts_in_one_click(
    alerted: Store, browser: TestClient
) -> None:
    """From the webhook's link: the before/after inline, each affected tool's decision now, the
    sessions still on an older listing, a link from the diff back; silencing is one click and
    resolves the alert, its cause the silence."""
    with alerted.sessions() as session:
        revoked = session.scalars(select(Alert.id).where(Alert.rule == "read-only-revoked")).one()
    with web_client(alerted) as api:  # a gateway reports a session that still holds v1
        held = {"server": "tenants", "session_id": "gw-7", "client": "gateway", "tools": listing(True)}
        assert api.post("/api/v1/sessions", json={**held, "connected_at": T0.isoformat()}).status_code == 201

    page = browser.get(urlsplit(webhook_urls(alerted)["read-only-revoked"]).path).text
    assert "Before and after: v1 → v2" in page and "read-only" in page
    assert "What hosts are told now" in page
    assert re.search(
        r'purge_tenant</a></th><td[^>]*><span class="decision decision-deny">deny</span>', page
    ), page
    assert "<code>gw-7</code>" in page, "the session that still holds the old listing"
    assert f'href="/alerts/{revoked}"' in browser.get("/servers/tenants/diff?from=1&to=2").text

    forms = re.findall(r'<form method="post" action="/silences" class="inline">(.*?)</form>', page, re.S)
    assert [re.search(r'name="duration" value="([^"]+)"', f).group(1) for f in forms] == ["1h", "4h", "1d"]  # type: ignore[union-attr]
    one_click = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', forms[0]))
    done = browser.post("/silences", data=one_click)
    assert done.status_code == 303 and done.headers["location"] == f"/alerts/{revoked}"
    after = browser.get(done.headers["location"]).text
    assert "silenced by dana until" in after and "silenced from alert #" in after
    with alerted.sessions() as session:
        assert session.get_one(Alert, revoked).resolve_cause == "silenced"
