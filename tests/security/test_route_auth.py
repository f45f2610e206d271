"""Every route needs the token, enumerated from the app itself so a new route cannot be forgotten.

The API's operations come from its OpenAPI document; every other route of the app (pages, hidden
aliases) is listed from `app.routes`, and each must either be in the document or be a page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from security.security_harness import api_operations, fill_path
from support.web import AUTH, TOKEN, app_routes, make_app, web_client

from monitor.approvals.hosts import HOOK_PATHS
from monitor.store import PollOutcome, Store

PUBLIC_API = {("get", "/healthz"), ("get", "/api/v1/healthz")}
"""Liveness, for load balancers: the only routes that answer without the token."""
OPEN_PAGES = {("get", "/login"), ("post", "/login"), ("post", "/logout")}
"""Signing in (and out), which must be reachable before signing in; they act on nothing else."""
WRONG = [
    {},
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
    {"Authorization": "Bearer"},
    {"Cookie": f"dm_session={TOKEN}"},
    {"X-Api-Token": TOKEN},
]


@pytest.fixture
def app(store: Store) -> FastAPI:
    async def poll_now(name: str) -> PollOutcome:
        raise AssertionError(f"polled {name} without the token")

    return make_app(store, clock=None, poll_now=poll_now)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with web_client(app, auth=None, follow_redirects=False) as test_client:
        yield test_client


def _request(client: TestClient, method: str, path: str, headers: dict[str, str], body: Any) -> Any:
    return client.request(method, path, headers=headers, json=body, params={"token": TOKEN})


def test_every_api_operation_refuses_a_missing_or_wrong_token(app: FastAPI, client: TestClient) -> None:
    """Each operation in the OpenAPI document (the document itself, and the routes left out of it,
    added), asked without the token, with wrong ones, in the wrong scheme, in a cookie, another
    header or the query string, and with or without a body. Must hold: 401 with a Bearer challenge,
    and a detail that says nothing about the resource; only the health checks answer."""
    schema = client.get("/api/v1/openapi.json", headers=AUTH).json()
    operations = {(method, path): operation for method, path, operation in api_operations(schema)}
    hidden = {(m, p) for m, p, in_schema in app_routes(app) if not in_schema and _is_api(p)}
    assert hidden == {("get", "/api/v1/openapi.json"), ("get", "/api/v1/healthz"), ("get", "/api/v1/metrics")}
    targets = {**operations, **{key: {} for key in hidden}}
    assert len(operations) >= 18
    checked = 0
    for (method, path), operation in sorted(targets.items()):
        url = fill_path(path, operation)
        if (method, path) in PUBLIC_API:
            assert client.request(method, url).status_code == 200, path
            continue
        for headers in WRONG:
            if path in HOOK_PATHS:
                _assert_hook_denies(client, url, headers)
                checked += 3
                continue
            for body in (None, {}, {"name": "x", "url": "https://x.example/"}):
                response = _request(client, method, url, headers, body)
                assert response.status_code == 401, (method, url, headers, body, response.text)
                assert response.headers["www-authenticate"] == "Bearer", (method, url)
                assert response.json() == {
                    "detail": "missing or wrong bearer token (Authorization: Bearer <token>)"
                }
                checked += 1
    assert checked >= 18 * len(WRONG) * 3
    assert {op for op in operations if op not in PUBLIC_API} == {
        (m, p) for (m, p), o in operations.items() if o.get("security")
    }, "the document marks every protected operation as needing the bearer token"


def _assert_hook_denies(client: TestClient, url: str, headers: dict[str, str]) -> None:
    """A host runs the call when its hook gets a 401, so a hook answers a caller that may not ask
    200 with a deny, in the host's own shape, whatever it sent."""
    bodies: list[Any] = [
        None,
        {},
        {"hook_event_name": "PreToolUse", "tool_name": "mcp__x__t", "tool_input": {}},
        {"hook_event_name": "BeforeTool", "tool_name": "mcp_x_t", "mcp_context": {"server_name": "x"}},
        {"operation": "mcp:tool:call", "resource": "mrn:mcp:x:tool:t"},
        {"operation": "mcp:prompt:get", "resource": "mrn:mcp:x:prompt:p"},
    ]
    for body in bodies:
        response = _request(client, "post", url, headers, body)
        assert response.status_code == 200, (url, headers, body, response.text)
        answer = response.json()
        if url.endswith("/toolhive/decision"):
            assert answer == {"allow": False}, (url, headers, body, answer)
        elif url.endswith("/gemini-cli"):
            assert answer["decision"] == "deny", (url, headers, body, answer)
        else:
            assert answer["hookSpecificOutput"]["permissionDecision"] == "deny", (url, headers, body, answer)


def test_a_body_that_is_not_json_is_refused_before_it_is_read_as_one(client: TestClient) -> None:
    """A write asked without the token and with a body that is not JSON. Must hold: 401, not a 422
    describing the body (an anonymous caller learns nothing about what a route accepts)."""
    for method, path in (
        ("post", "/api/v1/servers"),
        ("post", "/api/v1/sessions"),
        ("put", "/api/v1/sessions/a/b"),
    ):
        response = client.request(
            method, path, content=b"{not json", headers={"content-type": "application/json"}
        )
        assert response.status_code == 401, (path, response.status_code, response.text)


def test_every_page_needs_a_sign_in(app: FastAPI, client: TestClient) -> None:
    """Every page route (everything not in the API), without a sign-in or with a wrong token,
    session cookie or forged cookie. Must hold: GETs redirect to /login (303, carrying only the local
    path), form posts are refused (403 or a redirect to /login) and never act, and a wrong bearer
    token is a 401; only the sign-in pages are open. The bearer token works for pages too."""
    pages = sorted({(m, p) for m, p, in_schema in app_routes(app) if not in_schema and not _is_api(p)})
    assert ("get", "/") in pages and ("post", "/alerts/{alert_id}/ack") in pages
    forged = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Cookie": "dm_session=9999999999.deadbeef"},
        {"Cookie": f"dm_session={TOKEN}"},
        {"Cookie": "dm_session=0.0"},
    ]
    for method, path in pages:
        url = fill_path(path, {}, {"alert_id": "1", "name": "x", "tool": "t"})
        if (method, path) in OPEN_PAGES:
            continue
        for headers in forged:
            response = client.request(method, url, headers=headers)
            if "Authorization" in headers:  # a secret that is no token: refused at once, whatever the path
                assert response.status_code == 401, (url, headers, response.status_code)
            elif method == "get":
                assert response.status_code == 303, (url, headers, response.status_code)
                assert response.headers["location"].startswith("/login?next="), response.headers["location"]
            else:
                assert response.status_code in (303, 403), (url, headers, response.status_code)
                if response.status_code == 303:
                    assert response.headers["location"].startswith("/login")
        if method == "get":
            assert client.get(url, headers=AUTH).status_code in (200, 404), url


def _is_api(path: str) -> bool:
    return path.startswith("/api/") or path in ("/healthz", "/metrics")
