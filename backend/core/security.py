"""API keys: random secrets shown once; only their HMAC (peppered) is ever stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "isk_"


def generate_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(key: str, pepper: str) -> str:
    return hmac.new(pepper.encode(), key.encode(), hashlib.sha256).hexdigest()


def display_prefix(key: str) -> str:
    return key[:12]
