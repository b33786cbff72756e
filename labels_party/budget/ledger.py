"""The privacy-budget ledger: exact, atomic check-and-charge per (tenant, example).

``charge`` runs inside the caller's transaction, so a release row and its charge commit together or
not at all. It holds the tenant's write lock while it checks and updates, so concurrent charges for
one tenant serialize and can never overspend; charges for different tenants do not wait on each
other (on PostgreSQL). Every call appends a ``LedgerEntry``; nothing is ever deleted.

Per-example spend lives in ``ExampleSpendShard`` rows: 256 shards per tenant by the top byte of the
example key, each a pair of sorted int64 arrays (keys, micro-ε spent). A charge reads the shards it
touches, checks and adds with exact int64 arithmetic, and writes them back; a million examples cost
a few megabytes of I/O rather than a million row and index updates. Per-user spend lives in
``UserSpendShard`` rows of the same shape, and a charge checks and updates both under the same lock
in the same transaction: examples and users are charged together or not at all.

A shard may instead live in an immutable segment file (``segments.py``), written by a partitioned
charge (``partitioned.py``) whose merging and checking ran on a cluster; reading such a shard needs
the ``SegmentStore``. Every change to a tenant's spend or budgets bumps ``Tenant.ledger_version``
under the tenant's lock: a partitioned charge commits only if the version is still the one it read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from labels_party.budget.epsilon import ATTO
from labels_party.budget.errors import (
    BudgetExhaustedError,
    DeltaBudgetExhaustedError,
    Spent,
    UnknownTenantError,
    UserBudgetExhaustedError,
    UserDeltaTooLargeError,
)
from labels_party.budget.ledger_keys import Keys, distinct
from labels_party.budget.segments import SegmentStore
from labels_party.budget.shards import EMPTY, Shard, added, load_shards, save_shards
from labels_party.budget.summaries import SpendHistogram
from labels_party.storage.orm import ExampleSpendShard, LedgerEntry, Tenant, UserSpendShard


@dataclass(frozen=True)
class UserCharge:
    """What a release charges each of its users: distinct user keys and micro-ε each (the same
    ``ε_user`` for a user-level release; ``ε × examples`` of the user for an example-level one)."""

    keys: Keys
    amounts: Keys

    @staticmethod
    def of_examples(user_keys: Keys, epsilon_micro: int) -> UserCharge:
        """Group privacy: an example-level release costs a user ε for each of its examples in it."""
        keys, counts = np.unique(np.asarray(user_keys, dtype=np.int64), return_counts=True)
        return UserCharge(keys, counts.astype(np.int64) * epsilon_micro)

    @staticmethod
    def each(user_keys: Keys, epsilon_micro: int) -> UserCharge:
        keys = distinct(user_keys)
        return UserCharge(keys, np.full(keys.size, epsilon_micro, dtype=np.int64))


def lock_tenant(session: Session, tenant_id: str) -> Tenant:
    """Load the tenant and hold its write lock until the transaction ends. (Callers that change spend
    or budgets bump ``ledger_version`` with ``_changed``.)"""
    stmt = select(Tenant).where(Tenant.id == tenant_id)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    tenant = session.execute(stmt).scalar_one_or_none()
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    return tenant


# -- the sharded spend arrays --------------------------------------------------------------------
def _changed(tenant: Tenant) -> None:
    """Mark a change of the tenant's spend or budgets: a partitioned charge that read the old version
    can no longer commit."""
    tenant.ledger_version = (tenant.ledger_version or 0) + 1


def _aligned(users: UserCharge) -> Callable[[Shard], Keys]:
    """The amount of each of a shard's query keys, looked up in the charge."""
    order = np.argsort(users.keys)
    keys, amounts = users.keys[order], users.amounts[order]
    return lambda sh: amounts[np.searchsorted(keys, sh.query)]


def _spent(shards: list[Shard]) -> Spent:
    """What the keys of a refused charge have spent, as the refusal tells it (aggregates only)."""
    return SpendHistogram.of(np.concatenate([sh.current for sh in shards]) if shards else EMPTY).spent()


# -- ledger operations ---------------------------------------------------------------------------
def append_entry(
    session: Session, tenant_id: str, kind: str, epsilon_micro: int, examples: int, **fields: object
) -> LedgerEntry:
    """Append one ledger entry (the ledger is never updated or deleted)."""
    entry = LedgerEntry(
        tenant_id=tenant_id, kind=kind, epsilon_micro=epsilon_micro, examples=examples, **fields
    )
    session.add(entry)
    session.flush()
    return entry


def charge(
    session: Session,
    tenant_id: str,
    keys: Keys,
    epsilon_micro: int,
    *,
    users: UserCharge | None = None,
    release_id: str | None,
    api_key_id: str | None,
    note: str = "",
    store: SegmentStore,
    delta_atto: int = 0,
    user_delta_atto: int | None = None,
) -> LedgerEntry:
    """Charge ``epsilon_micro`` to every example in ``keys`` and ``users.amounts`` to each user, and
    ``delta_atto`` to the tenant's δ, or raise ``BudgetExhaustedError`` / ``UserBudgetExhaustedError``
    / ``DeltaBudgetExhaustedError`` having changed nothing. The caller commits (together with whatever
    the charge pays for). ``store`` is required: after any cluster charge a tenant's spend may live in
    segment files, and a charge that cannot read them must not exist.

    δ is kept tenant-wide: every (ε, δ) charge adds its δ to one counter, which bounds the δ of every
    example (an example is in at most all of those charges) — exact for the examples in all of them,
    conservative for the others; the ε part stays per example. ``user_delta_atto`` is the δ of the
    charge's largest user by group privacy (its examples together): when the tenant limits per-user
    spend, that is what the counter takes, so that it bounds every user's δ too."""
    if epsilon_micro <= 0:
        raise ValueError("epsilon_micro must be positive")
    if delta_atto < 0 or (user_delta_atto is not None and user_delta_atto < delta_atto):
        raise ValueError("delta_atto must be >= 0 and user_delta_atto >= delta_atto")
    if users is not None and (users.keys.shape != users.amounts.shape or np.any(users.amounts <= 0)):
        raise ValueError("a user charge needs one positive amount per user")
    tenant = lock_tenant(session, tenant_id)
    if user_delta_atto is not None and tenant.user_budget_micro is not None:
        if user_delta_atto >= ATTO:
            raise UserDeltaTooLargeError()
        delta_atto = user_delta_atto
    if delta_atto and tenant.delta_spent_atto + delta_atto > tenant.delta_budget_atto:
        raise DeltaBudgetExhaustedError(delta_atto, tenant.delta_spent_atto, tenant.delta_budget_atto)
    shards = load_shards(session, tenant_id, keys, ExampleSpendShard, store)
    requested = sum(sh.query.size for sh in shards)
    limit = tenant.budget_micro - epsilon_micro  # an example may be charged iff spent <= limit
    lacking = requested if limit < 0 else sum(int(np.count_nonzero(sh.current > limit)) for sh in shards)
    if lacking:
        raise BudgetExhaustedError(lacking, requested, epsilon_micro, tenant.budget_micro, _spent(shards))
    user_changes: list[tuple[Shard, Keys, Keys]] = []
    most = None
    if users is not None and users.keys.size:
        user_shards = load_shards(session, tenant_id, users.keys, UserSpendShard, store)
        amount_of = _aligned(users)
        most = int(users.amounts.max())
        if tenant.user_budget_micro is not None:
            over = sum(
                int(np.count_nonzero(sh.current + amount_of(sh) > tenant.user_budget_micro))
                for sh in user_shards
            )
            if over:
                raise UserBudgetExhaustedError(
                    over, int(users.keys.size), most, tenant.user_budget_micro, _spent(user_shards)
                )
        user_changes = added(user_shards, amount_of)
    _changed(tenant)
    tenant.delta_spent_atto += delta_atto
    save_shards(session, tenant_id, added(shards, lambda sh: np.full(sh.query.size, epsilon_micro, np.int64)))
    if user_changes:
        save_shards(session, tenant_id, user_changes, UserSpendShard)
    return append_entry(
        session,
        tenant_id,
        "charge",
        epsilon_micro,
        requested,
        users=int(users.keys.size) if users is not None else 0,
        user_epsilon_micro=most,
        release_id=release_id,
        api_key_id=api_key_id,
        note=note,
        delta_atto=delta_atto or None,
    )


def record_kept_charge(
    session: Session, tenant_id: str, release_id: str, epsilon_micro: int, examples: int, reason: str
) -> LedgerEntry:
    """Record that a release failed after its charge and that the charge stands (noise may have been
    drawn). Changes no spend; it makes the ledger say what happened to every charge."""
    return append_entry(
        session, tenant_id, "charge_kept", epsilon_micro, examples, release_id=release_id, note=reason
    )


def set_budget(
    session: Session, tenant_id: str, budget_micro: int, *, api_key_id: str | None, note: str = ""
) -> None:
    """Change the tenant's per-example budget; the change itself is a ledger entry."""
    if budget_micro < 0:
        raise ValueError("budget must be >= 0")
    tenant = lock_tenant(session, tenant_id)
    tenant.budget_micro = budget_micro
    _changed(tenant)
    append_entry(session, tenant_id, "budget_set", budget_micro, 0, api_key_id=api_key_id, note=note)


def set_delta_budget(
    session: Session, tenant_id: str, budget_atto: int, *, api_key_id: str | None, note: str = ""
) -> None:
    """Set the tenant's δ budget (atto-δ, over all (ε, δ) releases); the change is a ledger entry.
    Lowering it below what is spent refuses every later δ charge; it never un-spends."""
    if budget_atto < 0 or budget_atto >= 10**18:
        raise ValueError("a δ budget must be in [0, 1)")
    tenant = lock_tenant(session, tenant_id)
    tenant.delta_budget_atto = budget_atto
    _changed(tenant)
    append_entry(
        session, tenant_id, "delta_budget_set", 0, 0, delta_atto=budget_atto, api_key_id=api_key_id, note=note
    )


def set_user_budget(
    session: Session, tenant_id: str, budget_micro: int | None, *, api_key_id: str | None, note: str = ""
) -> None:
    """Set (or, with None, lift) the tenant's per-user budget; the change is a ledger entry."""
    if budget_micro is not None and budget_micro < 0:
        raise ValueError("budget must be >= 0")
    tenant = lock_tenant(session, tenant_id)
    tenant.user_budget_micro = budget_micro
    _changed(tenant)
    append_entry(
        session,
        tenant_id,
        "user_budget_set",
        budget_micro if budget_micro is not None else 0,
        0,
        api_key_id=api_key_id,
        note=note or ("per-user budget lifted" if budget_micro is None else ""),
    )


@dataclass(frozen=True)
class Ledger:
    """The party's ledger: its database and its segment store, both required. Every transaction that
    changes spend opens here and takes the tenant's lock first, before it inserts anything (inserting
    a row that references the tenant takes a key-share lock, and asking for the write lock only
    afterwards deadlocks two such transactions on PostgreSQL)."""

    sessions: sessionmaker[Session]
    segments: SegmentStore

    @contextmanager
    def transaction(self, tenant_id: str) -> Iterator[Charging]:
        with self.sessions.begin() as session:
            lock_tenant(session, tenant_id)
            yield Charging(session, tenant_id, self.segments)


@dataclass(frozen=True)
class Charging:
    """A transaction holding a tenant's ledger lock: charges made here commit with the transaction."""

    session: Session
    tenant_id: str
    segments: SegmentStore

    def charge(
        self,
        keys: Keys,
        epsilon_micro: int,
        *,
        users: UserCharge | None,
        release_id: str,
        api_key_id: str | None,
        note: str,
        delta_atto: int = 0,
        user_delta_atto: int | None = None,
    ) -> LedgerEntry:
        return charge(
            self.session,
            self.tenant_id,
            keys,
            epsilon_micro,
            users=users,
            release_id=release_id,
            api_key_id=api_key_id,
            note=note,
            store=self.segments,
            delta_atto=delta_atto,
            user_delta_atto=user_delta_atto,
        )
