"""Features-party tenants and their bearer API keys (hashed, shown once)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from features_party.storage.orm import ApiKey, Tenant
from labeldp.common.api_keys import Authenticated, find_active_key, issue_key


@dataclass(frozen=True)
class NewTenant:
    tenant_id: str
    api_key: str


def create_tenant(session: Session, name: str) -> NewTenant:
    if not name.strip():
        raise ValueError("tenant name must not be empty")
    if session.execute(select(Tenant).where(Tenant.name == name)).scalar_one_or_none() is not None:
        raise ValueError(f"a tenant named {name!r} already exists")
    tenant = Tenant(id=str(uuid.uuid4()), name=name)
    session.add(tenant)
    session.flush()
    return NewTenant(tenant.id, issue_key(session, ApiKey, tenant.id).api_key)


def authenticate(session: Session, key: str) -> Authenticated | None:
    return find_active_key(session, ApiKey, key)
