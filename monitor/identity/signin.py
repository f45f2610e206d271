"""Dashboard sessions, the CSRF tokens bound to them, and the messages shown after an action.

Every visitor gets a session cookie (signed, `HttpOnly`, `SameSite=Strict`) holding a random session
id and who signed in (nobody yet); signing in replaces it with a new id, so a session fixed by someone
else is worth nothing. A form's CSRF token is derived from the session id with the server's key, so
a token fetched in another session (another page on another port of the same host can set cookies
for this one) matches nothing. The message after an action travels in a signed cookie the server
writes, never in the URL, so nobody can make an arbitrary sentence appear in the banner.

The key is the database's `web_keys` row (`monitor.identity.storage.web_key`), shared by every
instance, mixed with the configured token: a new configured token signs everyone out. Signing is
itsdangerous's (HMAC-SHA256, a key derived per purpose), as Flask signs its sessions.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer
from itsdangerous import Signer as Hmac

SESSION_COOKIE = "dm_session"
FLASH_COOKIE = "dm_flash"
FLASH_SECONDS = 120


@dataclass(frozen=True)
class Session:
    """A dashboard session: its id, who signed in (`""`: nobody yet) and when it ends."""

    sid: str
    who: str
    expires: int


class Signer:
    """Signatures under the server's key, one purpose each (a session cookie, a form's CSRF token, a
    message). The key is read from the database the first time it is needed (`load`), not when the
    app is built, so the app starts, and `/healthz` says so, while the database is down."""

    def __init__(self, key: Callable[[], bytes], config_token: str | None) -> None:
        self._read_key = key
        self._config_token = (config_token or "").encode("utf-8", "surrogatepass")
        self._key: bytes | None = None
        self._lock = threading.Lock()

    def load(self) -> bytes:
        """The key, read once (it may touch the database: call it off the event loop first)."""
        if self._key is None:
            with self._lock:
                if self._key is None:
                    self._key = hashlib.sha256(self._read_key() + b"\x00" + self._config_token).digest()
        return self._key

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        return URLSafeSerializer(self.load(), salt=purpose, signer_kwargs={"digest_method": hashlib.sha256})

    def new_session(self, who: str, now: float, seconds: float) -> tuple[Session, str]:
        """A new session (a new id) and its cookie value."""
        session = Session(secrets.token_urlsafe(18), who, int(now + seconds))
        value = self._serializer("session").dumps(
            {"sid": session.sid, "who": session.who, "exp": session.expires}
        )
        return session, value

    def read_session(self, value: str, now: float) -> Session | None:
        data = self._read("session", value)
        if not isinstance(data, dict):
            return None
        sid, who, expires = data.get("sid"), data.get("who"), data.get("exp")
        if not isinstance(sid, str) or not isinstance(who, str) or not isinstance(expires, int):
            return None
        return Session(sid, who, expires) if expires > now else None

    def csrf(self, sid: str) -> str:
        """The CSRF token of one session's forms."""
        signer = Hmac(self.load(), salt="csrf", digest_method=hashlib.sha256)
        return signer.get_signature(sid.encode("utf-8", "surrogatepass")).decode("ascii")

    def flash(self, message: str) -> str:
        return self._serializer("flash").dumps(message)

    def read_flash(self, value: str) -> str | None:
        message = self._read("flash", value)
        return message if isinstance(message, str) else None

    def _read(self, purpose: str, value: str) -> Any:
        """What a signed value holds, or None when it is not one this server signed for `purpose`."""
        try:
            return self._serializer(purpose).loads(value)
        except (BadSignature, UnicodeError, ValueError):
            return None
