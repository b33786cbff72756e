"""Bearer API keys: random, shown once, stored only as a SHA-256 hash (both parties)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Protocol, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.requests import Request

from labeldp.common.errors import DomainError

KEY_PREFIX = "ldp_"


def new_key(prefix: str = KEY_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class _KeyRow(Protocol):
    revoked_at: Any


K = TypeVar("K", bound=_KeyRow)


def find_active_key(session: Session, model: type[K], key: str) -> K | None:
    """The unrevoked key row whose hash matches ``key`` (each party has its own ``ApiKey`` table)."""
    column = model.key_hash  # type: ignore[attr-defined]
    row = session.execute(select(model).where(column == hash_key(key))).scalar_one_or_none()
    return None if row is None or row.revoked_at is not None else row


def bearer_token(request: Request) -> str:
    """The token of an ``Authorization: Bearer …`` header, or 401."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise DomainError("unauthenticated", "send Authorization: Bearer <api key>", status=401)
    return token.strip()


def invalid_key() -> DomainError:
    return DomainError("unauthenticated", "the API key is not valid", status=401)
