"""The forged same-site post, in real Chromium: a page on another port of 127.0.0.1 (same site, other
origin) plants a session it fetched from `/login`, with that session's CSRF token, and posts "approve
every tool" through a 307, so the post arrives with `Origin: null` and `Sec-Fetch-Site: same-site`
and the victim's cookies. An earlier release acted on it (v2 approved, its critical alert resolved).

Skips when Playwright for Python or Chromium is missing.
"""

from __future__ import annotations

import http.client
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select
from support.browser import CHROMIUM, browser_page, live_app, sign_in
from support.web import add_token, make_app
from support.world import populate

from monitor.store import Store
from monitor.store.access import Approval, AuditEvent
from monitor.store.models import Alert

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"
)


def stolen_session(monitor: str) -> tuple[str, str]:
    """What anybody gets from the monitor's sign-in page: a session cookie and its CSRF token."""
    target = urlsplit(monitor)
    connection = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=30)
    try:
        connection.request("GET", "/login")
        answer = connection.getresponse()
        page = answer.read().decode()
        cookie = answer.getheader("set-cookie") or ""
    finally:
        connection.close()
    session = re.search(r"dm_session=([^;]+)", cookie)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert session and token, "the sign-in page hands out a session and its token"
    return session.group(1), token.group(1)


@contextmanager
def attacker_site(monitor: str, *, plant: bool) -> Iterator[str]:
    """Another port of 127.0.0.1: `/` (optionally) sets the stolen session cookie for the host and
    auto-submits a form to `/go`, which answers 307 to the monitor's approve form."""
    session, token = stolen_session(monitor)
    fields = {"csrf_token": token, "version": "4", "confirm": "yes", "resolve_alerts": "on", "note": "x"}
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    page = f'<form id="f" method="post" action="/go">{inputs}</form><script>f.submit()</script>'.encode()

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            if plant:  # a response of any port may set cookies for the host, HttpOnly ones included
                self.send_header("Set-Cookie", f"dm_session={session}; Path=/; HttpOnly; SameSite=Strict")
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(307)
            self.send_header("Location", f"{monitor}/servers/search/approve")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    thread = threading.Thread(target=server.serve_forever, name="attacker", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=15)
    assert not thread.is_alive()


@pytest.mark.parametrize("plant", [True, False], ids=["stolen session planted", "victim's own session"])
def test_a_forged_same_site_post_is_refused(store: Store, plant: bool) -> None:
    """Must hold: the post reaches the monitor from the victim's browser and is refused (403), no
    approval is made and the critical alert stays open, the refusal is audited; and the same person
    approving on the dashboard itself still works, so the refusal is the attack's, not the form's."""
    world = populate(store)
    secret = add_token(store, "ana", "approver")
    app = make_app(store, clock=None)
    approvals_before = _approvals(store)
    with live_app(app) as monitor, browser_page(monitor) as page:
        sign_in(page, secret, "/servers/search")
        with attacker_site(monitor, plant=plant) as attacker:
            with page.expect_response(f"{monitor}/servers/search/approve") as arrived:
                page.goto(attacker)
            response = arrived.value
            assert response.status == 403, response.status
            sent = response.request.all_headers()
            assert sent.get("origin") == "null" and sent.get("sec-fetch-site") == "same-site", sent
            assert "refused" in page.content()
        assert _approvals(store) == approvals_before, "the forged post approved something"
        with store.sessions() as session:
            alert = session.get_one(Alert, world.alert_ids["open:read-only-revoked"])
            assert alert.state == "open"
        app.state.web.identity.log.flush()
        with store.sessions() as session:
            refused = session.scalars(
                select(AuditEvent.action).where(
                    AuditEvent.result == "refused", AuditEvent.source == "127.0.0.1"
                )
            ).all()
        # the planted session is nobody's, so its role is refused first; the victim's own, its origin
        assert refused == (["role.refused"] if plant else ["form.refused"]), refused

        if plant:  # the planted cookie replaced the victim's session: she signs in again
            sign_in(page, secret, "/servers/search")
        page.goto("/servers/search/diff?from=1&to=4")
        page.get_by_role("button", name=re.compile("Approve every tool")).click()
        page.get_by_role("button", name="Approve — as ana").click()
        page.wait_for_url(re.compile(r"/servers/search/diff\?from=1&to=4$"))
        assert "ana approved" in page.content()
        assert len(_approvals(store)) > len(approvals_before)


def _approvals(store: Store) -> list[tuple[str, str | None]]:
    with store.sessions() as session:
        return [(a.action, a.actor) for a in session.scalars(select(Approval).order_by(Approval.id))]
