"""Standard Webhooks signatures (https://www.standardwebhooks.com), made by the specification's own
Python library.

Only the secret is read here: a `whsec_<base64>` secret is decoded strictly (a typo is an error at
start, where the library would decode what base64 it can find), any other secret is its UTF-8 bytes.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

log = logging.getLogger(__name__)

_WHSEC = "whsec_"


def signing_key(secret: str) -> bytes:
    """`whsec_<base64>` secrets are decoded, as the Standard Webhooks libraries do; others are UTF-8."""
    if not secret.startswith(_WHSEC):
        return secret.encode("utf-8")
    try:
        return base64.b64decode(secret.removeprefix(_WHSEC), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a whsec_ secret must be base64 after the prefix") from None


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header of one request: `v1,<base64 HMAC-SHA256>`."""
    return Webhook(key).sign(msg_id, datetime.fromtimestamp(timestamp, UTC), body)


def key_from_env(webhook: str, secret_env: str | None) -> bytes | None:
    """The signing key of webhook `webhook` from the variable `secret_env` names (None: unsigned)."""
    if not secret_env:
        return None
    secret = os.environ.get(secret_env)
    if not secret:
        log.warning("webhook %s: %s is not set, so deliveries go unsigned", webhook, secret_env)
        return None
    try:
        return signing_key(secret)
    except ValueError as exc:
        raise ValueError(f"webhook {webhook}: {secret_env}: {exc}") from None
