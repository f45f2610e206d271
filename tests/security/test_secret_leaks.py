"""Secrets never leave the process: not in API answers, pages, logs, webhook bodies or the database.

`drift-monitor serve` runs as deployed, with every kind of secret configured: the API token, a
webhook signing secret, `${VAR}`-expanded config values (a header, a URL query, a stdio server's
environment) and headers registered over the API. The servers polled echo what they were sent in
their error messages, so the monitor must scrub what comes back, not only what it writes itself.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from security.security_harness import api_operations, fill_path, form_csrf_token
from support import SERVERS, Receiver, Service, free_port, http_server, migrate_config, webhook_secret

KEY = b"security-suite webhook key 0042"
SECRETS = {
    "SEC_API_TOKEN": "sec-api-token-4b1f0d9a7c",
    "SEC_WEBHOOK_SECRET": webhook_secret(KEY),
    "SEC_CONFIG_TOKEN": "cfg-header-secret-91d0e3",
    "SEC_URL_TOKEN": "url-query-secret-3e8f5a",
    "SEC_STDIO_TOKEN": "stdio-env-secret-c4d2b8",
    "SEC_PATH_TOKEN": "path-secret-0a9e61",
}
API_HEADERS = {"Authorization": "Bearer api-header-secret-55c2ab", "X-Api-Key": "api-key-secret-77e1f0"}
WAIT = 30.0
NAMES = ("echo-config", "echo-stdio", "echo-api", "refused-path")


def forms_of_secrets() -> dict[str, str]:
    """Every secret, and the forms it could leak in (the webhook key also as its base64 and raw bytes)."""
    found = {name: value for name, value in SECRETS.items()}
    found["webhook key (base64)"] = base64.b64encode(KEY).decode()
    found["webhook key (raw)"] = KEY.decode()
    for header, value in API_HEADERS.items():
        found[f"API header {header}"] = value.removeprefix("Bearer ")
    return found


def write_config(tmp_path: Path, database: Path, config_url: str, webhook_url: str) -> Path:
    stdio_args = json.dumps([str(SERVERS / "hostile_server.py"), "rpc-error"])
    config = tmp_path / "monitor.toml"
    config.write_text(
        f"""[monitor]
database_url = "sqlite:///{database}"
poll_interval = "1h"
poll_timeout = "5s"
api_token_env = "SEC_API_TOKEN"
allowed_server_hosts = ["127.0.0.1"]

[[servers]]
name = "echo-config"
transport = "http"
url = "{config_url}?key=${{SEC_URL_TOKEN}}"
headers = {{ Authorization = "Bearer ${{SEC_CONFIG_TOKEN}}" }}

[[servers]]
name = "echo-stdio"
transport = "stdio"
command = {json.dumps(sys.executable)}
args = {stdio_args}
env = {{ DRIFT_TEST_SECRET = "${{SEC_STDIO_TOKEN}}" }}

[[servers]]
name = "refused-path"
transport = "http"
url = "http://127.0.0.1:{free_port()}/${{SEC_PATH_TOKEN}}/mcp"

[[webhooks]]
name = "ops"
url = "{webhook_url}"
secret_env = "SEC_WEBHOOK_SECRET"
min_severity = "high"
""",
        encoding="utf-8",
    )
    return config


@pytest.mark.slow
def test_no_secret_reaches_answers_pages_logs_webhooks_or_the_database(tmp_path: Path) -> None:
    """Three servers that echo their credentials back in errors (a config header, a stdio env value,
    API-registered headers) are polled until `server-unreachable` alerts go out as webhooks, and
    every API GET and every page is fetched. Must hold: the echoes were really scrubbed (`[redacted]`
    in the errors); none of the secrets, in any form, is in any response body or header, the service's
    whole log output, a webhook request, or (except the API-registered headers, kept to poll with)
    the database file; every webhook passes the independent signature check."""
    env = {**os.environ, **SECRETS}
    database = tmp_path / "monitor.db"
    token = SECRETS["SEC_API_TOKEN"]
    auth = {"Authorization": f"Bearer {token}"}
    seen: list[str] = []  # every response, headers and body

    def keep(response: httpx.Response) -> httpx.Response:
        seen.append(f"{response.request.method} {response.request.url} {response.status_code}")
        seen.extend(f"{k}: {v}" for k, v in response.headers.items())
        seen.append(response.text)
        return response

    config_header = f"Authorization:Bearer {SECRETS['SEC_CONFIG_TOKEN']}"
    with (
        Receiver(KEY) as receiver,
        http_server("hostile_server.py", "rpc-error", "--require-header", config_header) as config_url,
        http_server(
            "hostile_server.py",
            "rpc-error",
            "--require-header",
            f"Authorization:{API_HEADERS['Authorization']}",
        ) as api_url,
    ):
        config = write_config(tmp_path, database, config_url, receiver.url)
        migrate_config(config, env)
        service = Service(config, env)
        try:
            service.wait_ready()
            with httpx.Client(base_url=service.url, timeout=30.0) as client:
                created = keep(
                    client.post(
                        "/api/v1/servers",
                        json={"name": "echo-api", "url": api_url, "headers": API_HEADERS},
                        headers=auth,
                    )
                )
                assert created.status_code == 201, created.text
                for name in NAMES:
                    for _ in range(3):  # the third failure in a row opens server-unreachable
                        polled = keep(client.post(f"/api/v1/servers/{name}/poll", headers=auth)).json()
                        assert polled["ok"] is False, polled
                        assert "[redacted]" in polled["error"], ("the echo was not scrubbed", polled)
                assert receiver.wait_for(lambda r: len(r.delivered) >= len(NAMES), timeout=WAIT), (
                    receiver.requests
                )

                schema = keep(client.get("/api/v1/openapi.json", headers=auth)).json()
                alert_ids = [
                    a["id"] for a in keep(client.get("/api/v1/alerts", headers=auth)).json()["items"]
                ]
                assert alert_ids
                for method, path, operation in api_operations(schema):
                    if method != "get":
                        continue
                    for name in NAMES:
                        url = fill_path(
                            path, operation, {"name": name, "server": name, "alert_id": str(alert_ids[0])}
                        )
                        params = {"time": "2100-01-01T00:00:00Z"} if path.endswith("/at") else None
                        keep(client.get(url, headers=auth, params=params))
                keep(client.get("/metrics", headers={**auth, "Accept": "application/openmetrics-text"}))

                login = keep(client.get("/login"))
                signed_in = keep(
                    client.post(
                        "/login",
                        data={"csrf_token": form_csrf_token(login.text), "token": token, "next": "/"},
                    )
                )
                assert signed_in.status_code == 303 and "dm_session" in client.cookies
                pages = ["/", "/alerts?state=all", "/sessions", "/at"]
                for name in NAMES:
                    pages += [
                        f"/servers/{name}",
                        f"/servers/{name}/diff",
                        f"/at?server={name}&time=2100-01-01",
                    ]
                for page in pages:
                    response = keep(client.get(page))
                    assert response.status_code in (200, 404), (page, response.status_code)
                    assert "[redacted]" not in page
                servers_page = client.get("/servers/echo-config").text
                assert "[redacted]" in servers_page, "the scrubbed error is what the page shows"
        finally:
            code = service.stop()
        assert code == 0, service.output()[-3000:]

        deliveries = [r for r in receiver.requests if r.status == 200]
        assert len({r.id for r in deliveries}) >= len(NAMES) and all(r.verified for r in receiver.requests)
        webhook_text = [
            json.dumps({k: v for k, v in r.headers.items() if k != "webhook-signature"}) + r.body.decode()
            for r in receiver.requests
        ]
        assert any("server-unreachable" in text for text in webhook_text)

    log = service.output()
    assert "server-unreachable" in log or "webhook ops: delivered" in log, "the log was captured"
    database_text = _database_text(database)
    places: dict[str, str] = {
        "API answers and pages": "\n".join(seen),
        "service log": log,
        "webhook requests": "\n".join(webhook_text),
        "database": database_text,
    }
    leaks = [
        (what, where)
        for what, secret in forms_of_secrets().items()
        for where, text in places.items()
        if secret in text and not (where == "database" and what.startswith("API header"))
    ]
    assert leaks == [], leaks
    assert API_HEADERS["X-Api-Key"] in database_text, "the API headers are stored, to poll with"


def _database_text(path: Path) -> str:
    """Every value in every table of the SQLite file, as text."""
    connection = sqlite3.connect(path)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows: list[Any] = []
        for table in tables:
            rows += connection.execute(f'SELECT * FROM "{table}"').fetchall()
    finally:
        connection.close()
    raw = "".join(p.read_bytes().decode("latin-1") for p in path.parent.glob(path.name + "*"))
    return "\n".join(repr(row) for row in rows) + raw
