"""Standard Webhooks signatures (https://www.standardwebhooks.com)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os

from monitor.config.webhooks import WebhookConfig

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
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def key_from_env(webhook: WebhookConfig) -> bytes | None:
    if not webhook.secret_env:
        return None
    secret = os.environ.get(webhook.secret_env)
    if not secret:
        log.warning("webhook %s: %s is not set, so deliveries go unsigned", webhook.name, webhook.secret_env)
        return None
    try:
        return signing_key(secret)
    except ValueError as exc:
        raise ValueError(f"webhook {webhook.name}: {webhook.secret_env}: {exc}") from None
