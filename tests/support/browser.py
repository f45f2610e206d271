"""The dashboard in real headless Chromium: the app under uvicorn on 127.0.0.1 in a thread, and a
page on it, at a chosen viewport, that records script errors and CSP violations.

Chromium is Debian's package (or $DRIFT_MONITOR_CHROMIUM); Playwright for Python drives it.
Screenshots go to test-artifacts/ (git-ignored); with DRIFT_MONITOR_UPDATE_SCREENSHOTS=1 the ones
marked for publishing are also copied to docs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from fastapi import FastAPI

CHROMIUM = Path(os.environ.get("DRIFT_MONITOR_CHROMIUM", "/usr/bin/chromium"))
ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
"""The two widths the dashboard is checked and photographed at."""


@contextmanager
def live_app(app: FastAPI) -> Iterator[str]:
    """Serve `app` on a kernel-chosen loopback port; yields its base URL; stops uvicorn at the end."""
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # connections queue here until uvicorn accepts: no need to wait for it
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, name="uvicorn", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        listener.close()
    assert not thread.is_alive(), "uvicorn did not stop"


@contextmanager
def browser_page(base_url: str, viewport: dict[str, int] = DESKTOP) -> Iterator[Any]:
    """A Chromium page on `base_url`; `page.problems` collects console errors and page errors."""
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport=viewport, base_url=base_url)
            page = context.new_page()
            page.set_default_timeout(15_000)
            problems: list[str] = []
            page.on(
                "console", lambda message: problems.append(message.text) if message.type == "error" else None
            )
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.problems = problems
            yield page
        finally:
            browser.close()


def sign_in(page: Any, token: str, path: str = "/") -> None:
    """Sign in with `token` and land on `path`: on the sign-in page the browser is at (where a page
    that needs a sign-in sent it, carrying `path` along), else on /login?next=`path`."""
    if urlsplit(page.url).path != "/login":
        page.goto("/login?next=" + quote(path, safe="/"))
    page.get_by_label("Token", exact=True).fill(token)
    page.get_by_role("button", name="Sign in").click()
    landing = urljoin(page.url, path)
    page.wait_for_url(lambda url: url == landing)


def overflows(page: Any) -> int:
    """How many CSS pixels the page is wider than the viewport (0: nothing scrolls sideways)."""
    width: int = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    return max(0, width)


def shoot(page: Any, name: str, *, publish: bool = False) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if publish and os.environ.get("DRIFT_MONITOR_UPDATE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / f"{name}.png")
    return path
