#!/usr/bin/env python3
"""The product's outside, written to a folder: the API's OpenAPI document and every dashboard page's
HTML for one seeded history, so that a change meant to keep behaviour (moving code between
packages, replacing a helper by a library) can be shown to keep it.

    .venv/bin/python tests/surface.py dump OUT       # write OUT/openapi.json and OUT/pages/*.html
    .venv/bin/python tests/surface.py compare A B    # the files that differ, and how (exit 1 if any)

Run `dump` on the code before the change and on the code after it, then `compare` the two folders.
The data is `support.showcase`'s: the incident, a server with long names, and an approval, a
silence, a named token, host hook decisions and an acknowledged alert made through the API; the
clock stands at `support.world.NOW`. Pages are found by following every link from the overview (GET
only, the same origin, at most `MAX_PAGES`: `support.showcase.crawl`), with a visitor's sign-in page
too. What changes from run to run (the CSRF tokens) is written as a placeholder, so two dumps of
the same code are the same.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.incident import incident_policy
from support.showcase import act, crawl, seed_showcase
from support.web import web_client

from monitor.store import Store, make_engine, migrate

MAX_PAGES = 400

STARTS = (
    "/",
    "/search?q=merge",
    "/search?q=lookup&time=2026-03-01T13:30:00Z",
    "/at?server=search&time=2026-03-01T12:30:00Z",
    "/servers/search/tool?tool=lookup",
    "/servers/nobody",
    "/alerts/9999",
)
"""Where the crawl starts: the overview, and pages that only a form or a typed address reaches."""

VOLATILE = (
    (re.compile(r'name="csrf_token" value="[^"]*"'), 'name="csrf_token" value="CSRF"'),
    (re.compile(r"csrf=[A-Za-z0-9_\-.%]+"), "csrf=CSRF"),
)


def dump(out: Path) -> int:
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'surface.db'}")
        migrate(engine)
        policy = incident_policy()
        showcase = seed_showcase(Store(engine, hooks=[policy]), policy)
        try:
            with web_client(showcase.store, alerting=policy) as api:
                act(api)
            with web_client(showcase.store, auth="session", alerting=policy) as browser:
                pages = normalised(crawl(browser, STARTS, MAX_PAGES))
            with web_client(showcase.store, auth=None, alerting=policy) as visitor:
                pages.update(normalised(crawl(visitor, ("/login", "/login?next=/alerts/3"), MAX_PAGES)))
            with web_client(showcase.store, alerting=policy) as api:
                openapi = api.get("/api/v1/openapi.json").json()
        finally:
            engine.dispose()
    (out / "pages").mkdir(parents=True, exist_ok=True)
    (out / "openapi.json").write_text(json.dumps(openapi, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for path, (status, html) in sorted(pages.items()):
        (out / "pages" / file_name(path)).write_text(
            f"<!-- GET {path}: {status} -->\n{html}", encoding="utf-8"
        )
    print(f"surface: {len(pages)} pages and the OpenAPI document ({len(openapi['paths'])} paths) in {out}")
    return 0


def normalised(pages: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
    return {path: (status, normalise(html)) for path, (status, html) in pages.items()}


def normalise(html: str) -> str:
    for pattern, placeholder in VOLATILE:
        html = pattern.sub(placeholder, html)
    return html


def file_name(path: str) -> str:
    """A file name per page: readable, and distinct for paths that differ only in escaped characters."""
    readable = re.sub(r"[^A-Za-z0-9_.=-]+", "_", path.strip("/")) or "overview"
    return f"{readable[:80]}-{hashlib.sha256(path.encode()).hexdigest()[:8]}.html"


def compare(before: Path, after: Path) -> int:
    names = sorted(
        {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
        | {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    )
    differing = 0
    for name in names:
        old, new = before / name, after / name
        if not old.exists() or not new.exists():
            print(f"only in {'after' if new.exists() else 'before'}: {name}")
            differing += 1
            continue
        a, b = old.read_text(encoding="utf-8"), new.read_text(encoding="utf-8")
        if a != b:
            differing += 1
            print(f"differs: {name}")
            sys.stdout.writelines(
                list(difflib.unified_diff(a.splitlines(True), b.splitlines(True), n=1))[:40]
            )
    print(f"surface: {len(names)} files compared, {differing} differ")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("dump").add_argument("out", type=Path)
    both = commands.add_parser("compare")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        return dump(args.out)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
