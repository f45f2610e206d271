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


BROKEN_WORDS = """(longest) => {
  const segments = new Intl.Segmenter("en", { granularity: "word" });
  const lines = (node, start, end) => {
    const range = document.createRange();
    range.setStart(node, start);
    range.setEnd(node, end);
    const boxes = [...range.getClientRects()].filter((box) => box.width > 0 && box.height > 0);
    return boxes.filter((box) => Math.abs(box.top - boxes[0].top) > boxes[0].height / 2).length + 1;
  };
  const broken = [];
  for (const cell of document.querySelectorAll("main td, main th")) {
    const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = texts.nextNode(); node; node = texts.nextNode()) {
      for (const word of node.data.matchAll(/\\S+/g)) {
        if (word[0].length > longest) continue;
        for (const part of segments.segment(word[0])) {
          const start = word.index + part.index;
          if (part.isWordLike && lines(node, start, start + part.segment.length) > 1) broken.push(word[0]);
        }
      }
    }
  }
  return broken;
}"""


def squeezed_buttons(page: Any) -> list[str]:
    """The labels of the page's buttons drawn narrower than their own text (the Acknowledge button
    once showed "A" at 1280 px)."""
    found: list[str] = page.evaluate(
        "() => [...document.querySelectorAll('main button')]"
        ".filter(b => b.offsetParent && b.scrollWidth > b.clientWidth + 1)"
        ".map(b => b.textContent)"
    )
    return found


def broken_words(page: Any, longest: int = 10) -> list[str]:
    """The words of at most `longest` characters (between spaces) that a table cell of the page
    breaks, as the browser laid them out (from `Range.getClientRects`): set on two lines inside a
    run of letters or digits, as Unicode's word segmentation (`Intl.Segmenter`) finds them. A line
    may end at the punctuation inside a word, as in print: after the hyphen of "read-only", between
    the `>` and `<` of `"><img`."""
    found: list[str] = page.evaluate(BROKEN_WORDS, longest)
    return found


def shoot(page: Any, name: str, *, publish: bool = False) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if publish and os.environ.get("DRIFT_MONITOR_UPDATE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / f"{name}.png")
    return path
