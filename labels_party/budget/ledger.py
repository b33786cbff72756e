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
from pathlib import Path

import numpy as np
import numpy.typing as npt
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.errors import DomainError
from labels_party.budget.epsilon import ATTO
from labels_party.budget.segments import SegmentStore, read_segment
from labels_party.storage.orm import ExampleSpendShard, LedgerEntry, SpendShard, Tenant, UserSpendShard

Keys = npt.NDArray[np.int64]
SHARDS = 256
_EMPTY = np.zeros(0, dtype=np.int64)


class UnknownTenantError(LookupError):
    """A tenant id that does not exist: a bug or a race with tenant removal, never user input."""


class BudgetExhaustedError(DomainError):
    """The charge would take ``lacking`` of the ``requested`` examples over the per-example budget
    (409: nothing was charged)."""

    def __init__(self, lacking: int, requested: int, epsilon_micro: int, budget_micro: int) -> None:
        super().__init__(
            "budget-exhausted",
            f"{lacking} of {requested} examples lack budget for ε = {epsilon_micro / 1e6:g} "
            f"(per-example budget {budget_micro / 1e6:g})",
            status=409,
            examples_lacking_budget=lacking,
            examples_requested=requested,
        )
        self.lacking, self.requested = lacking, requested


class UserBudgetExhaustedError(DomainError):
    """The charge would take ``lacking`` of the ``requested`` users over the per-user budget (409)."""

    def __init__(self, lacking: int, requested: int, most_micro: int, budget_micro: int) -> None:
        super().__init__(
            "user-budget-exhausted",
            f"{lacking} of {requested} users lack budget for this release (up to ε = {most_micro / 1e6:g} "
            f"per user; per-user budget {budget_micro / 1e6:g})",
            status=409,
            users_lacking_budget=lacking,
            users_requested=requested,
        )
        self.lacking, self.requested = lacking, requested


class UserDeltaTooLargeError(DomainError):
    """An (ε, δ) charge whose group-privacy δ for its largest user is not below 1 (422): with a
    per-user budget the per-user guarantee must hold for δ too, and a δ of 1 guarantees nothing."""

    def __init__(self) -> None:
        super().__init__(
            "user-delta-too-large",
            "with a per-user budget, a user's δ is the group-privacy δ over all of their examples, and "
            "for this request's largest user it is not below 1: lower epsilon or delta, or train on a "
            "user-level label release (at most τ examples per user)",
            status=422,
        )


class DeltaBudgetExhaustedError(DomainError):
    """The charge's δ would take the tenant over its δ budget (409: nothing was charged)."""

    def __init__(self, delta_atto: int, spent_atto: int, budget_atto: int) -> None:
        super().__init__(
            "delta-budget-exhausted",
            f"this release needs δ = {delta_atto / 1e18:.3g}, and the tenant has {spent_atto / 1e18:.3g} "
            f"of its δ budget {budget_atto / 1e18:.3g} spent",
            status=409,
            delta_requested=delta_atto / 1e18,
            delta_spent=spent_atto / 1e18,
            delta_budget=budget_atto / 1e18,
        )


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
        keys = np.unique(np.asarray(user_keys, dtype=np.int64))
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


def decode(blob: bytes) -> Keys:
    return np.frombuffer(blob, dtype="<i8").astype(np.int64)


def _encode(values: Keys) -> bytes:
    return values.astype("<i8").tobytes()


def by_shard(keys: Keys) -> tuple[Keys, npt.NDArray[np.intp]]:
    """Distinct keys ordered so that each shard's keys are contiguous and sorted, plus the shard
    boundaries. (The shard is the key's top byte; within one shard signed and unsigned order agree.)"""
    unique = np.unique(np.asarray(keys, dtype=np.int64))
    ordered = unique[np.argsort(unique.view(np.uint64), kind="stable")]
    shard = (ordered.view(np.uint64) >> np.uint64(56)).astype(np.int64)
    return ordered, np.searchsorted(shard, np.arange(SHARDS + 1))


@dataclass
class Shard:
    index: int
    keys: Keys  # stored keys, sorted
    spent: Keys  # stored spend, aligned with keys
    stored: bool  # whether a row exists yet
    query: Keys  # the keys of this shard the operation touches, sorted
    position: npt.NDArray[np.intp]  # where each query key is (or would be inserted) in ``keys``
    found: npt.NDArray[np.bool_]

    @property
    def current(self) -> Keys:
        """Spend of each query key (0 for examples never charged)."""
        out = np.zeros(self.query.size, dtype=np.int64)
        out[self.found] = self.spent[self.position[self.found]]
        return out


@dataclass(frozen=True)
class StoredShard:
    """A shard row as read: its blobs, or its segment file (full path) and that file's digest."""

    keys: bytes
    spent: bytes
    segment: str | None
    sha256: str | None

    def arrays(self) -> tuple[Keys, Keys]:
        """(keys, spend), from the blobs or from the segment file (digest checked)."""
        if self.segment is None:
            return decode(self.keys), decode(self.spent)
        assert self.sha256 is not None
        return read_segment(Path(self.segment), self.sha256)


def stored_shards(
    session: Session,
    tenant_id: str,
    model: SpendShard,
    shards: list[int] | None,
    store: SegmentStore,
) -> dict[int, StoredShard]:
    """The tenant's rows of ``shards`` (None: all of them)."""
    query = select(model.shard, model.keys, model.spent, model.segment, model.segment_sha256).where(
        model.tenant_id == tenant_id
    )
    if shards is not None:
        query = query.where(model.shard.in_(shards))
    out = {}
    for r in session.execute(query):
        segment = None
        if r.segment is not None:
            segment = str(store.path(r.segment))
        out[r.shard] = StoredShard(r.keys, r.spent, segment, r.segment_sha256)
    return out


def _load(
    session: Session,
    tenant_id: str,
    keys: Keys,
    model: SpendShard,
    store: SegmentStore,
) -> list[Shard]:
    ordered, bounds = by_shard(keys)
    touched = [s for s in range(SHARDS) if bounds[s + 1] > bounds[s]]
    stored: dict[int, tuple[Keys, Keys]] = {}
    if touched:
        stored = {
            s: row.arrays() for s, row in stored_shards(session, tenant_id, model, touched, store).items()
        }
    return [
        shard_state(s, *stored.get(s, (_EMPTY, _EMPTY)), s in stored, ordered[bounds[s] : bounds[s + 1]])
        for s in touched
    ]


def shard_state(index: int, keys: Keys, spent: Keys, stored: bool, query: Keys) -> Shard:
    """Where a shard's sorted query keys are in its stored (sorted) keys."""
    position = np.searchsorted(keys, query)
    found = position < keys.size
    found[found] = keys[position[found]] == query[found]
    return Shard(index, keys, spent, stored, query, position, found)


def _save(
    session: Session,
    tenant_id: str,
    changed: list[tuple[Shard, Keys, Keys]],
    model: SpendShard = ExampleSpendShard,
) -> None:
    """Write back (shard, new keys, new spend) as blobs: updates for stored shards (a shard that was in
    a segment file comes back into its row), inserts for new ones."""
    rows = [
        (
            sh.stored,
            {
                "tenant_id": tenant_id,
                "shard": sh.index,
                "keys": _encode(k),
                "spent": _encode(v),
                "segment": None,
                "segment_sha256": None,
            },
        )
        for sh, k, v in changed
    ]
    updates = [row for stored, row in rows if stored]
    inserts = [row for stored, row in rows if not stored]
    if updates:  # ORM bulk UPDATE by primary key (tenant_id, shard)
        session.execute(update(model), updates)
    if inserts:
        session.execute(insert(model), inserts)


def added(shards: list[Shard], amount_of: Callable[[Shard], Keys]) -> list[tuple[Shard, Keys, Keys]]:
    """Each shard's new (keys, spend) after adding ``amount_of(shard)`` to its query keys."""
    changed = []
    for sh in shards:
        amounts = amount_of(sh)
        spent = sh.spent.copy()
        spent[sh.position[sh.found]] += amounts[sh.found]
        new = ~sh.found
        changed.append(
            (
                sh,
                np.insert(sh.keys, sh.position[new], sh.query[new]),
                np.insert(spent, sh.position[new], amounts[new]),
            )
        )
    return changed


def _aligned(users: UserCharge) -> Callable[[Shard], Keys]:
    """The amount of each of a shard's query keys, looked up in the charge."""
    order = np.argsort(users.keys)
    keys, amounts = users.keys[order], users.amounts[order]
    return lambda sh: amounts[np.searchsorted(keys, sh.query)]


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
    shards = _load(session, tenant_id, keys, ExampleSpendShard, store)
    requested = sum(sh.query.size for sh in shards)
    limit = tenant.budget_micro - epsilon_micro  # an example may be charged iff spent <= limit
    lacking = requested if limit < 0 else sum(int(np.count_nonzero(sh.current > limit)) for sh in shards)
    if lacking:
        raise BudgetExhaustedError(lacking, requested, epsilon_micro, tenant.budget_micro)
    user_changes: list[tuple[Shard, Keys, Keys]] = []
    most = None
    if users is not None and users.keys.size:
        user_shards = _load(session, tenant_id, users.keys, UserSpendShard, store)
        amount_of = _aligned(users)
        most = int(users.amounts.max())
        if tenant.user_budget_micro is not None:
            over = sum(
                int(np.count_nonzero(sh.current + amount_of(sh) > tenant.user_budget_micro))
                for sh in user_shards
            )
            if over:
                raise UserBudgetExhaustedError(over, int(users.keys.size), most, tenant.user_budget_micro)
        user_changes = added(user_shards, amount_of)
    _changed(tenant)
    tenant.delta_spent_atto += delta_atto
    _save(session, tenant_id, added(shards, lambda sh: np.full(sh.query.size, epsilon_micro, np.int64)))
    if user_changes:
        _save(session, tenant_id, user_changes, UserSpendShard)
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
    shards = _load(session, tenant_id, keys, ExampleSpendShard, store)
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
    shards = _load(session, tenant_id, user_keys, UserSpendShard, store)
    current = np.concatenate([sh.current for sh in shards]) if shards else _EMPTY
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
        return _EMPTY, _EMPTY
    arrays = [row.arrays() for row in rows.values()]
    return np.concatenate([k for k, _ in arrays]), np.concatenate([v for _, v in arrays])


def total_spent(session: Session, tenant_id: str, store: SegmentStore) -> int:
    return int(spend_of_tenant(session, tenant_id, store)[1].sum())


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
