"""Times read alike everywhere: one form, `2026-03-01 12:00:00 UTC` (`monitor.core.times.utc_text`,
the pages' `ts` and `utc` filters), and never raw ISO 8601 in what a page shows, whoever wrote the
sentence it is in: a silence's end in a resolution, a stale listing's decision, a session open too
long, the audit log, the version choices of a diff."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from sqlalchemy import update
from support.incident import incident_policy
from support.showcase import act, crawl, seed_showcase
from support.web import AUTH, page_text, web_client
from support.world import NOW

from monitor.core.states import AlertState, ResolveCause
from monitor.core.times import utc_text
from monitor.sessions import service as sessions
from monitor.store import Store
from monitor.store.models import Alert

RAW_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


def test_an_instant_reads_one_way() -> None:
    two_hours_east = timezone(timedelta(hours=2))
    assert (
        utc_text(datetime(2026, 3, 1, 13, 4, 5, 123456, tzinfo=two_hours_east)) == "2026-03-01 11:04:05 UTC"
    )


def test_no_page_shows_a_raw_iso_time(store: Store) -> None:
    """Every page a signed-in person reaches by links from the overview and the pages only a form
    reaches, over the showcase and the sentences with times in them."""
    policy = incident_policy()
    store.hooks.append(policy)
    showcase = seed_showcase(store, policy)
    with store.sessions.begin() as session:
        sessions.check_sessions(  # sessions open for over an hour: session-long-lived, since when
            session,
            now=NOW,
            grace=timedelta(minutes=5),
            max_age=timedelta(hours=1),
            expiry=timedelta(days=1),
            policy=policy,
        )
        session.execute(  # resolved by a silence of an earlier release, which wrote its end in ISO
            update(Alert)
            .where(Alert.id == showcase.alert_ids["tool-removed/export"])
            .values(
                state=AlertState.RESOLVED,
                open_key=None,
                resolved_at=NOW,
                resolved_by="config",
                resolve_cause=ResolveCause.SILENCED,
                resolve_note="silenced until 2026-03-01T19:00:00.123456Z: an older release",
            )
        )
    with web_client(store, alerting=policy) as api:
        act(api)
        silenced = api.post(
            "/api/v1/silences",
            json={"server": "files", "duration": "2h", "reason": "moving racks", "resolve_alerts": True},
            headers=AUTH,
        )
        assert silenced.status_code == 201, silenced.text
    starts = [
        "/",
        "/alerts?state=all",
        "/at?server=search&time=2026-03-01T11:00",  # before its first version: says when that was
        "/search?q=lookup&time=2026-03-01T13:10",
        *(url for urls in showcase.pages().values() for url in urls),
    ]
    with web_client(store, auth="session", alerting=policy) as browser:
        pages = crawl(browser, starts)
    shown = {path: page_text(html) for path, (status, html) in pages.items() if "<html" in html[:100]}
    assert len(shown) > 50, "the crawl reached the dashboard"
    raw = [
        (path, text[max(0, m.start() - 40) : m.end() + 20])
        for path, text in shown.items()
        for m in RAW_ISO.finditer(text)
    ]
    assert raw == [], f"raw ISO times on pages (path, text around it): {raw[:10]}"
    everything = "\n".join(shown.values())
    for sentence in (
        "silenced by Administrator until 2026-03-01 19:00:00 UTC: moving racks",
        "silenced by config until 2026-03-01 19:00:00 UTC: an older release",
        "has been open since 2026-03-01 12:05:00 UTC",
        "has not verified the server's listing since 2026-03-01 12:00:00 UTC",
        "its first version was seen 2026-03-01 12:00:00 UTC.",
        "ends_at: 2026-03-01 19:00:00 UTC",
    ):
        assert sentence in " ".join(everything.split()), f"no page says {sentence!r}"
