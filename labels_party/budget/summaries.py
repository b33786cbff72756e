"""What a tenant may read of its spend: over a set of examples (max, min, how many can take more), over
a set of users (quantiles only, never one user's spend by key), and the whole of it (for audits and
tests)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from labels_party.budget.errors import UnknownTenantError
from labels_party.budget.ledger_keys import Keys
from labels_party.budget.segments import SegmentStore
from labels_party.budget.shards import EMPTY, load_shards, stored_shards
from labels_party.storage.orm import ExampleSpendShard, SpendShard, Tenant, UserSpendShard


@dataclass(frozen=True)
class SpendSummary:
    examples: int
    max_spent_micro: int
    min_spent_micro: int
    can_take: int  # how many of the examples can still take the asked ε


def spend_summary(
    session: Session, tenant_id: str, keys: Keys, epsilon_micro: int, store: SegmentStore
) -> SpendSummary:
    """Spend over a set of examples (e.g. a dataset's universe); examples never charged count as 0."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    shards = load_shards(session, tenant_id, keys, ExampleSpendShard, store)
    if not shards:
        return SpendSummary(0, 0, 0, 0)
    current = np.concatenate([sh.current for sh in shards])
    limit = tenant.budget_micro - epsilon_micro
    can_take = int(np.count_nonzero(current <= limit)) if limit >= 0 else 0
    return SpendSummary(int(current.size), int(current.max()), int(current.min()), can_take)


@dataclass(frozen=True)
class UserSpendSummary:
    users: int
    spent_quantiles_micro: dict[str, int]  # p50, p90, p99, max over the users
    can_take: int | None  # how many could still take the asked per-user ε (None: no per-user budget)


def user_spend_summary(
    session: Session,
    tenant_id: str,
    user_keys: Keys,
    epsilon_micro: int,
    store: SegmentStore,
) -> UserSpendSummary:
    """Spend over a set of users (e.g. a dataset's): quantiles only, never one user's spend by key."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    shards = load_shards(session, tenant_id, user_keys, UserSpendShard, store)
    current = np.concatenate([sh.current for sh in shards]) if shards else EMPTY
    if not current.size:
        return UserSpendSummary(0, {}, None)
    quantiles = {
        name: int(np.quantile(current, q, method="higher"))
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
    }
    can_take = None
    if tenant.user_budget_micro is not None:
        can_take = int(np.count_nonzero(current + epsilon_micro <= tenant.user_budget_micro))
    return UserSpendSummary(int(current.size), quantiles, can_take)


def spend_of_tenant(
    session: Session, tenant_id: str, store: SegmentStore, model: SpendShard = ExampleSpendShard
) -> tuple[Keys, Keys]:
    """Every (key, micro-ε spent) pair of the tenant's examples (or users) that were ever charged."""
    rows = stored_shards(session, tenant_id, model, None, store)
    if not rows:
        return EMPTY, EMPTY
    arrays = [row.arrays() for row in rows.values()]
    return np.concatenate([k for k, _ in arrays]), np.concatenate([v for _, v in arrays])


def total_spent(session: Session, tenant_id: str, store: SegmentStore) -> int:
    return int(spend_of_tenant(session, tenant_id, store)[1].sum())
