"""Tables read in whole words at every width, in real headless Chromium.

Every dashboard page route (enumerated from the app, so a new page must be added to
`support.showcase`) is opened with rows in its tables: `support.incident`'s incident, a server whose
tool has a long name and a long description, and what people did through the API. At a phone's, a
narrow window's, a tablet's, two laptops' and a wide screen's width, no table cell may break a word
of ten characters or fewer (cells used to set "Ale/rt", "Decis/ion", and at 390 px one letter per
line), nothing may scroll the page sideways (a table wider than the window scrolls in its own box),
and no button may be drawn narrower than its label. Skips when Playwright or Chromium is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from support.browser import (
    CHROMIUM,
    broken_words,
    browser_page,
    live_app,
    overflows,
    sign_in,
    squeezed_buttons,
)
from support.incident import incident_policy
from support.showcase import LONG_TOOL, NO_TABLE, Showcase, act, page_routes, seed_showcase
from support.web import TOKEN, make_app, web_client

from monitor.store import Store, make_engine, migrate

pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"
)

WIDTHS = (390, 800, 1024, 1280, 1366, 1920)
"""A phone, a narrow window, a tablet, the laptops on-call engineers use, and a wide screen."""


@dataclass(frozen=True)
class Site:
    base: str
    app: FastAPI
    showcase: Showcase


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The showcase served for the whole module: the tests only read it."""
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('tables') / 'tables.db'}")
    migrate(engine)
    policy = incident_policy()
    showcase = seed_showcase(Store(engine, hooks=[policy]), policy)
    app = make_app(showcase.store, alerting=policy)
    try:
        with web_client(app) as api:
            act(api)
        with live_app(app) as base:
            yield Site(base, app, showcase)
    finally:
        engine.dispose()


def test_every_page_route_is_checked(site: Site) -> None:
    assert page_routes(site.app) == set(site.showcase.pages()) | set(NO_TABLE), (
        "a page route neither checked here nor said to have no table (support/showcase.py)"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_tables_keep_short_words_whole_and_the_page_in_the_window(site: Site, width: int) -> None:
    found = []
    with browser_page(site.base, {"width": width, "height": 900}) as page:
        sign_in(page, TOKEN)
        for route, urls in site.showcase.pages().items():
            cells = 0
            for url in urls:
                page.goto(url)
                page.locator("main h1").wait_for()
                cells += page.locator("main td").count()
                if broken := broken_words(page):
                    found.append((url, "broken words", sorted(set(broken))))
                if extra := overflows(page):
                    found.append((url, "wider than the window by (px)", extra))
                if squeezed := squeezed_buttons(page):
                    found.append((url, "buttons narrower than their labels", squeezed))
            assert cells > 0, f"{route}: no table cell to check on {urls}"
        page.goto("/servers/runbooks")
        assert LONG_TOOL in page.locator("main").inner_text(), "the long tool name is on the page"
        assert page.problems == [], page.problems
    assert found == [], f"at {width} px: {found}"
