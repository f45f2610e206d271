"""`drift-monitor import-registry URL_OR_FILE`: servers from the MCP Registry (docs/contract.md section 11).

Reads a `server.json` file, a saved page, or a registry's `GET /v0.1/servers` (every page, following
`metadata.nextCursor`). Each remote is registered like `POST /api/v1/servers`: checked against
`[monitor] allowed_server_hosts` and polled from then on. Its `${VAR}` placeholders (secret
headers, URL variables) are filled from this command's environment, so a secret is given once, at
import, and never written anywhere but the database row the poller needs; a remote whose variable is
unset is skipped and named. With `--toml` nothing is registered: every remote is printed as a
`[[servers]]` table with its placeholders, for the config file. Packages (stdio) are always
printed as TOML for a person to review, never registered: polling one runs its code.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from pydantic import ValidationError

from monitor.config import ServerConfig
from monitor.console.common import EXIT_OK, CommandError, config_option, load, open_store
from monitor.core.registry import RegistryRemote, read_registry, registry_page, remote_toml
from monitor.core.text import make_visible

MAX_PAGES = 1000
"""A registry that keeps answering with new cursors is cut off here, with an error."""
MAX_PAGE_BYTES = 32 * 1024 * 1024
EXIT_SKIPPED = 1
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "import-registry", help="register remote servers from MCP Registry server.json files or pages"
    )
    config_option(parser)
    parser.add_argument(
        "source", metavar="URL_OR_FILE", help="a server.json or page file, or a registry URL (…/v0.1/servers)"
    )
    parser.add_argument("--toml", action="store_true", help="print every server as TOML; register nothing")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per registry request")
    parser.set_defaults(run=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    config = load(args)
    servers = _read_source(args.source, args.timeout)
    entries = read_registry(servers)
    for name, reason in entries.errors.items():
        print(f"drift-monitor: {make_visible(name)}: skipped: {make_visible(reason)}", file=sys.stderr)
    for name, note in entries.notes.items():
        print(f"drift-monitor: {make_visible(name)}: {make_visible(note)}", file=sys.stderr)
    if args.toml:
        sys.stdout.write("\n".join([*(remote_toml(r) for r in entries.remotes), *entries.packages_toml]))
        return EXIT_OK
    skipped = len(entries.errors)
    if entries.remotes:
        skipped += _register(config, entries.remotes)
    if entries.packages_toml:
        print("\n# stdio packages: review, then add to the config file if wanted\n")
        sys.stdout.write("\n".join(entries.packages_toml))
    return EXIT_SKIPPED if skipped else EXIT_OK


def _register(config: Any, remotes: list[RegistryRemote]) -> int:
    """Register each remote that may be registered; one line each. Returns how many were skipped."""
    from monitor.collect.client.http import resolved_addresses
    from monitor.store.remotes import add_remote_server

    store = open_store(config)
    policy = config.monitor.host_policy
    skipped = 0
    try:
        for remote in remotes:
            problem, url, headers = _expanded(remote)
            if problem is None:
                try:
                    ServerConfig(name=remote.name, transport=remote.transport, url=url, headers=headers)
                except ValidationError as exc:
                    problem = "; ".join(
                        str(e["msg"]) for e in exc.errors(include_input=False, include_url=False)
                    )
            if problem is None:
                refusal = policy.url_refusal(url, resolved_addresses)
                problem = f"refused by allowed_server_hosts: {refusal}" if refusal else None
            if problem is not None:
                skipped += 1
                print(f"{remote.name}: skipped: {make_visible(problem)}")
                continue
            with store.sessions.begin() as session:
                added = add_remote_server(
                    session,
                    name=remote.name,
                    transport=remote.transport,
                    url=url,
                    headers=headers,
                    now=datetime.now(UTC),
                )
            filled = (
                f"; {', '.join(dict.fromkeys(remote.variables))} from the environment"
                if remote.variables
                else ""
            )
            state = "registered" if added else "already registered"
            print(f"{remote.name}: {state} ({remote.transport} {make_visible(url)}){filled}")
    finally:
        store.engine.dispose()
    return skipped


def _expanded(remote: RegistryRemote) -> tuple[str | None, str, dict[str, str]]:
    """The remote's url and headers with `${VAR}` filled from the environment, or what is missing."""
    missing = sorted({v for v in remote.variables if not os.environ.get(v)})
    if missing:
        return f"set {', '.join(missing)} (or use --toml and the config file)", remote.url, {}

    def fill(text: str) -> str:
        return _VARIABLE.sub(lambda match: os.environ[match.group(1)], text)

    return None, fill(remote.url), {key: fill(value) for key, value in remote.headers.items()}


def _read_source(source: str, timeout: float) -> list[Any]:
    if not re.match(r"^https?://", source):
        try:
            document = json.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise CommandError(f"{source}: cannot read: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CommandError(f"{source}: not JSON: {exc}") from None
        return _page(document, source)[0]
    return _fetch_pages(source, timeout)


def _page(document: Any, where: str) -> tuple[list[Any], str | None]:
    try:
        return registry_page(document)
    except ValueError as exc:
        raise CommandError(f"{where}: {exc}") from None


def _fetch_pages(url: str, timeout: float) -> list[Any]:
    """Every page of a registry listing (or the one document at `url`), following `nextCursor`."""
    import httpx

    servers: list[Any] = []
    seen: set[str] = set()
    cursor: str | None = None
    with httpx.Client(
        timeout=timeout, follow_redirects=True, headers={"accept": "application/json"}
    ) as client:
        for _ in range(MAX_PAGES):
            page_url = _with_cursor(url, cursor)
            try:
                response = client.get(page_url)
            except httpx.HTTPError as exc:
                raise CommandError(f"{url}: {type(exc).__name__}: {exc}") from None
            if response.status_code != 200:
                raise CommandError(f"{page_url}: HTTP {response.status_code} {response.reason_phrase}")
            if len(response.content) > MAX_PAGE_BYTES:
                raise CommandError(f"{page_url}: a page over {MAX_PAGE_BYTES} bytes")
            try:
                document = response.json()
            except ValueError:
                raise CommandError(f"{page_url}: not JSON") from None
            page, cursor = _page(document, page_url)
            servers += page
            if cursor is None:
                return servers
            if cursor in seen:
                raise CommandError(f"{url}: the registry repeated cursor {cursor!r}")
            seen.add(cursor)
    raise CommandError(f"{url}: more than {MAX_PAGES} pages")


def _with_cursor(url: str, cursor: str | None) -> str:
    if cursor is None:
        return url
    parts = urlsplit(url)
    query = "&".join(part for part in [parts.query, urlencode({"cursor": cursor})] if part)
    return urlunsplit(parts._replace(query=query))
