"""What a tenant may read of its spend: over a set of examples (max, min, how many can take more), over
a set of users (quantiles only, never one user's spend by key), and the whole of it (for audits and
tests).

Both summaries come from a ``SpendHistogram``: the distinct amounts spent and how many examples (or
users) spent each. Reading it is the O(examples) part; answering from it, for any ε asked, costs
O(distinct amounts) — usually a handful, since every release adds one amount to all it covers — so a
reader can keep it (``labels_party/datasets/budget.py`` does, per dataset and ledger version)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session

from labels_party.budget.errors import Spent, UnknownTenantError
from labels_party.budget.ledger_keys import Keys
from labels_party.budget.segments import SegmentStore
from labels_party.budget.shards import EMPTY, load_shards, stored_shards
from labels_party.storage.orm import ExampleSpendShard, SpendShard, Tenant, UserSpendShard

MAX_BUCKETS = 50  # a spend distribution's buckets in an answer (a chart's worth)


@dataclass(frozen=True)
class SpendHistogram:
    """The multiset of amounts spent (micro-ε) over a set of examples or users: ``values`` sorted and
    distinct, ``counts`` how many have spent each (never charged: 0)."""

    values: Keys
    counts: Keys

    @staticmethod
    def of(spent: Keys) -> SpendHistogram:
        values, counts = np.unique(np.asarray(spent, dtype=np.int64), return_counts=True)
        return SpendHistogram(values.astype(np.int64), counts.astype(np.int64))

    @staticmethod
    def merged(parts: list[SpendHistogram]) -> SpendHistogram:
        """One histogram of several disjoint sets (a partitioned charge's shards)."""
        if not parts:
            return SpendHistogram.of(EMPTY)
        values, where = np.unique(np.concatenate([p.values for p in parts]), return_inverse=True)
        counts = np.bincount(where, weights=np.concatenate([p.counts for p in parts]))
        return SpendHistogram(values.astype(np.int64), counts.astype(np.int64))

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def at_most(self, limit: int) -> int:
        """How many have spent at most ``limit``."""
        return int(self.counts[self.values <= limit].sum())

    def quantile(self, q: float) -> int:
        """``np.quantile(spent, q, method="higher")``, from the counts."""
        rank = int(np.ceil((self.total - 1) * q))
        return int(self.values[int(np.searchsorted(np.cumsum(self.counts), rank, side="right"))])

    def spent(self) -> Spent:
        """The typical (median) and the worst (most) amount: what a budget refusal tells."""
        if not self.total:
            return Spent(0, 0)
        return Spent(self.quantile(0.5), int(self.values[-1]))

    def buckets(self, most: int = MAX_BUCKETS) -> list[tuple[int, int, int]]:
        """The distribution as ``(lowest, highest, how many)`` micro-ε buckets: each distinct amount
        its own bucket when there are at most ``most``, else ``most`` equal ranges (the empty ones
        left out), each stated by the lowest and highest amount it holds. Aggregates only."""
        if self.values.size <= most:
            return [(int(v), int(v), int(c)) for v, c in zip(self.values, self.counts, strict=True)]
        lo, hi = int(self.values[0]), int(self.values[-1])
        which = np.minimum((self.values - lo) * most // (hi - lo + 1), most - 1)
        out = []
        for b in np.unique(which):
            inside = which == b
            amounts = self.values[inside]
            out.append((int(amounts[0]), int(amounts[-1]), int(self.counts[inside].sum())))
        return out

    def examples(self, budget_micro: int, epsilon_micro: int) -> SpendSummary:
        if not self.total:
            return SpendSummary(0, 0, 0, 0)
        limit = budget_micro - epsilon_micro  # an example may be charged iff spent <= limit
        can_take = self.at_most(limit) if limit >= 0 else 0
        return SpendSummary(self.total, int(self.values[-1]), int(self.values[0]), can_take)

    def users(self, user_budget_micro: int | None, epsilon_micro: int) -> UserSpendSummary:
        if not self.total:
            return UserSpendSummary(0, {}, None)
        quantiles = {
            name: self.quantile(q) for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        }
        can_take = None if user_budget_micro is None else self.at_most(user_budget_micro - epsilon_micro)
        return UserSpendSummary(self.total, quantiles, can_take)


def spend_histogram(
    session: Session, tenant_id: str, keys: Keys, store: SegmentStore, model: SpendShard = ExampleSpendShard
) -> SpendHistogram:
    """What each of ``keys`` (examples, or users with ``UserSpendShard``) has spent, as a histogram."""
    shards = load_shards(session, tenant_id, keys, model, store)
    return SpendHistogram.of(np.concatenate([sh.current for sh in shards]) if shards else EMPTY)


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
    return spend_histogram(session, tenant_id, keys, store).examples(tenant.budget_micro, epsilon_micro)


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
    histogram = spend_histogram(session, tenant_id, user_keys, store, UserSpendShard)
    return histogram.users(tenant.user_budget_micro, epsilon_micro)


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
