"""Tenants and their bearer API keys (stored as SHA-256 hashes, shown once at creation)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from labeldp.common.api_keys import Authenticated, find_active_key, issue_key
from labels_party.budget.ledger import set_budget, set_delta_budget, set_user_budget
from labels_party.storage.orm import ApiKey, Tenant


@dataclass(frozen=True)
class NewTenant:
    tenant_id: str
    api_key: str  # the only time the plain key exists outside the caller


def create_tenant(
    session: Session,
    name: str,
    budget_micro: int,
    user_budget_micro: int | None = None,
    delta_budget_atto: int = 0,
) -> NewTenant:
    """Create a tenant with a per-example (and optionally a per-user and a δ) budget, recorded in the
    ledger, and its first key. A δ budget of 0 allows pure-ε releases only."""
    if not name.strip():
        raise ValueError("tenant name must not be empty")
    if session.execute(select(Tenant).where(Tenant.name == name)).scalar_one_or_none() is not None:
        raise ValueError(f"a tenant named {name!r} already exists")
    tenant = Tenant(id=str(uuid.uuid4()), name=name, budget_micro=0)
    session.add(tenant)
    session.flush()
    set_budget(session, tenant.id, budget_micro, api_key_id=None, note="initial budget")
    if user_budget_micro is not None:
        set_user_budget(
            session, tenant.id, user_budget_micro, api_key_id=None, note="initial per-user budget"
        )
    if delta_budget_atto:
        set_delta_budget(session, tenant.id, delta_budget_atto, api_key_id=None, note="initial δ budget")
    return NewTenant(tenant.id, issue_key(session, ApiKey, tenant.id).api_key)


def authenticate(session: Session, key: str) -> Authenticated | None:
    return find_active_key(session, ApiKey, key)
