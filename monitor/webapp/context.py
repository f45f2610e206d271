"""What every request handler shares: the store, the config, the API token, the clock and the poller."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from starlette.requests import HTTPConnection

from monitor.config import Config
from monitor.notify.alerts import Alerting
from monitor.store import PollOutcome, Store

PollNow = Callable[[str], Awaitable[PollOutcome]]


@dataclass
class WebContext:
    """Everything a request handler needs, kept on `app.state.web`."""

    store: Store
    config: Config
    token: str | None
    poll_now: PollNow | None
    clock: Callable[[], datetime]
    alerting: Alerting
    """The alert policy session closes resolve alerts with (the service's, so its deliverer is woken)."""

    @property
    def token_env(self) -> str:
        return self.config.monitor.api_token_env

    @property
    def session_grace(self) -> timedelta:
        return timedelta(seconds=self.config.monitor.session_grace)

    def now(self) -> datetime:
        return self.clock()

    def bearer_ok(self, connection: HTTPConnection) -> bool:
        """A constant-time comparison of the request's bearer token with the configured one."""
        if self.token is None:
            return False
        scheme, _, given = connection.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            return False
        return hmac.compare_digest(given.strip().encode("utf-8", "surrogatepass"), self.token.encode("utf-8"))

    def sign(self, purpose: str, value: str) -> str:
        """An HMAC of `value` under a key for one purpose derived from the API token, so that all
        monitor processes agree on it and a new token invalidates every signature."""
        token = self.token or ""
        key = hashlib.sha256(f"drift-monitor {purpose}\x00{token}".encode("utf-8", "surrogatepass")).digest()
        return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


SESSION_COOKIE = "dm_session"
SESSION_SECONDS = 12 * 3600
"""How long a dashboard sign-in lasts."""


def session_cookie_value(web: WebContext, now: float) -> str:
    """A sign-in that expires SESSION_SECONDS after `now`: the expiry and its signature, no secret."""
    expires = str(int(now) + SESSION_SECONDS)
    return f"{expires}.{web.sign('session', expires)}"


def session_cookie_valid(web: WebContext, value: str, now: float) -> bool:
    expires, _, signature = value.partition(".")
    if not expires.isdigit() or not signature:
        return False
    if not hmac.compare_digest(signature.encode(), web.sign("session", expires).encode()):
        return False
    return int(expires) > now
