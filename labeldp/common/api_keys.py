"""Bearer API keys: random, shown once, stored only as a SHA-256 hash (both parties)."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import select
from sqlalchemy.orm import Session

from labeldp.common.errors import DomainError

KEY_PREFIX = "ldp_"


@dataclass(frozen=True)
class Authenticated:
    """Who is calling (both parties): the tenant a valid bearer key belongs to, and the key itself (the
    labels party's ledger records which key acted)."""

    tenant_id: str
    api_key_id: str


def new_key(prefix: str = KEY_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class _KeyRow(Protocol):
    revoked_at: Any


K = TypeVar("K", bound=_KeyRow)


def find_active_key(session: Session, model: type[K], key: str) -> Authenticated | None:
    """The tenant and id of the unrevoked key whose hash matches ``key`` (each party has its own
    ``ApiKey`` table). Every request asks this: two columns, not an ORM object (a fifth of a short
    read's time went to loading the row)."""
    table: Any = model
    found = session.execute(
        select(table.tenant_id, table.id, table.revoked_at).where(table.key_hash == hash_key(key))
    ).first()
    return None if found is None or found.revoked_at is not None else Authenticated(found.tenant_id, found.id)


# declared as the document's security scheme (Swagger's Authorize button); a missing or malformed header
# is answered by ``bearer_token`` as problem+json, not by FastAPI
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A tenant's API key (`labeldp labels|features tenant create`, `… key create`).",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


def bearer_token(credentials: HTTPAuthorizationCredentials | None) -> str:
    """The token of an ``Authorization: Bearer …`` header, or 401."""
    token = "" if credentials is None else credentials.credentials.strip()
    if not token:
        raise DomainError("unauthenticated", "send Authorization: Bearer <api key>", status=401)
    return token


def invalid_key() -> DomainError:
    return DomainError("unauthenticated", "the API key is not valid", status=401)


class KeyRow(Protocol):
    id: Any
    tenant_id: Any
    key_hash: Any
    prefix: Any
    created_at: Any
    revoked_at: Any


R = TypeVar("R", bound=KeyRow)


@dataclass(frozen=True)
class IssuedKey:
    key_id: str
    api_key: str  # the only time the plain key exists outside the caller


def issue_key(session: Session, model: type[R], tenant_id: str) -> IssuedKey:
    """A new key for the tenant; only its hash and a short prefix (to recognise it) are stored."""
    key = new_key()
    key_id = str(uuid.uuid4())
    session.add(model(id=key_id, tenant_id=tenant_id, key_hash=hash_key(key), prefix=key[:10]))  # type: ignore[call-arg]
    session.flush()
    return IssuedKey(key_id, key)


def keys_of(session: Session, model: type[R], tenant_id: str) -> list[R]:
    statement = select(model).where(model.tenant_id == tenant_id).order_by(model.created_at)
    return list(session.execute(statement).scalars())


def revoke_key(session: Session, model: type[R], key_id: str) -> R:
    """Revoke one key at once (its next request is a 401); ``ValueError`` for an unknown key."""
    row = session.get(model, key_id)
    if row is None:
        raise ValueError(f"no API key {key_id}")
    if row.revoked_at is None:
        row.revoked_at = datetime.now(UTC)
    return row


def rotate_keys(session: Session, model: type[R], tenant_id: str) -> tuple[IssuedKey, int]:
    """Issue a new key and revoke every other active key of the tenant, in one transaction."""
    revoked = 0
    for row in keys_of(session, model, tenant_id):
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)
            revoked += 1
    return issue_key(session, model, tenant_id), revoked
