"""Bearer API keys: random, shown once, stored only as a SHA-256 hash (both parties)."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "ldp_"


def new_key(prefix: str = KEY_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
