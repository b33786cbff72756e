"""The privacy-budget ledger: exact, atomic check-and-charge per (tenant, example).

``charge`` runs inside the caller's transaction, so a release row and its charge commit together or
not at all. It holds the tenant's write lock while it checks and updates, so concurrent charges for
one tenant serialize and can never overspend; charges for different tenants do not wait on each
other (on PostgreSQL). Every call appends a ``LedgerEntry``; nothing is ever deleted.

Per-example spend lives in ``ExampleSpendShard`` rows: 256 shards per tenant by the top byte of the
example key, each a pair of sorted int64 arrays (keys, micro-ε spent). A charge reads the shards it
touches, checks and adds with exact int64 arithmetic, and writes them back; a million examples cost
a few megabytes of I/O rather than a million row and index updates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from labeldp.common.errors import DomainError
from labels_party.storage.orm import ExampleSpendShard, LedgerEntry, Tenant

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


def lock_tenant(session: Session, tenant_id: str) -> Tenant:
    """Load the tenant and hold its write lock until the transaction ends."""
    stmt = select(Tenant).where(Tenant.id == tenant_id)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    tenant = session.execute(stmt).scalar_one_or_none()
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    return tenant


# -- the sharded spend arrays --------------------------------------------------------------------
def _decode(blob: bytes) -> Keys:
    return np.frombuffer(blob, dtype="<i8").astype(np.int64)


def _encode(values: Keys) -> bytes:
    return values.astype("<i8").tobytes()


def _by_shard(keys: Keys) -> tuple[Keys, npt.NDArray[np.intp]]:
    """Distinct keys ordered so that each shard's keys are contiguous and sorted, plus the shard
    boundaries. (The shard is the key's top byte; within one shard signed and unsigned order agree.)"""
    unique = np.unique(np.asarray(keys, dtype=np.int64))
    ordered = unique[np.argsort(unique.view(np.uint64), kind="stable")]
    shard = (ordered.view(np.uint64) >> np.uint64(56)).astype(np.int64)
    return ordered, np.searchsorted(shard, np.arange(SHARDS + 1))


@dataclass
class _Shard:
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


def _load(session: Session, tenant_id: str, keys: Keys) -> list[_Shard]:
    ordered, bounds = _by_shard(keys)
    touched = [s for s in range(SHARDS) if bounds[s + 1] > bounds[s]]
    stored: dict[int, tuple[Keys, Keys]] = {}
    if touched:
        rows = session.execute(
            select(ExampleSpendShard.shard, ExampleSpendShard.keys, ExampleSpendShard.spent).where(
                ExampleSpendShard.tenant_id == tenant_id, ExampleSpendShard.shard.in_(touched)
            )
        )
        stored = {row.shard: (_decode(row.keys), _decode(row.spent)) for row in rows}
    shards = []
    for s in touched:
        query = ordered[bounds[s] : bounds[s + 1]]
        keys_s, spent_s = stored.get(s, (_EMPTY, _EMPTY))
        position = np.searchsorted(keys_s, query)
        found = position < keys_s.size
        found[found] = keys_s[position[found]] == query[found]
        shards.append(_Shard(s, keys_s, spent_s, s in stored, query, position, found))
    return shards


def _save(session: Session, tenant_id: str, changed: list[tuple[_Shard, Keys, Keys]]) -> None:
    """Write back (shard, new keys, new spend): updates for stored shards, inserts for new ones."""
    rows = [
        (sh.stored, {"tenant_id": tenant_id, "shard": sh.index, "keys": _encode(k), "spent": _encode(v)})
        for sh, k, v in changed
    ]
    updates = [row for stored, row in rows if stored]
    inserts = [row for stored, row in rows if not stored]
    if updates:  # ORM bulk UPDATE by primary key (tenant_id, shard)
        session.execute(update(ExampleSpendShard), updates)
    if inserts:
        session.execute(insert(ExampleSpendShard), inserts)


# -- ledger operations ---------------------------------------------------------------------------
def _append(
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
    release_id: str | None,
    api_key_id: str | None,
    note: str = "",
) -> LedgerEntry:
    """Charge ``epsilon_micro`` to every example in ``keys``, or raise ``BudgetExhaustedError``
    having changed nothing. The caller commits (together with whatever the charge pays for)."""
    if epsilon_micro <= 0:
        raise ValueError("epsilon_micro must be positive")
    tenant = lock_tenant(session, tenant_id)
    shards = _load(session, tenant_id, keys)
    requested = sum(sh.query.size for sh in shards)
    limit = tenant.budget_micro - epsilon_micro  # an example may be charged iff spent <= limit
    lacking = requested if limit < 0 else sum(int(np.count_nonzero(sh.current > limit)) for sh in shards)
    if lacking:
        raise BudgetExhaustedError(lacking, requested, epsilon_micro, tenant.budget_micro)
    changed = []
    for sh in shards:
        spent = sh.spent.copy()
        spent[sh.position[sh.found]] += epsilon_micro
        new = ~sh.found
        changed.append(
            (
                sh,
                np.insert(sh.keys, sh.position[new], sh.query[new]),
                np.insert(spent, sh.position[new], epsilon_micro),
            )
        )
    _save(session, tenant_id, changed)
    return _append(
        session,
        tenant_id,
        "charge",
        epsilon_micro,
        requested,
        release_id=release_id,
        api_key_id=api_key_id,
        note=note,
    )


def record_kept_charge(
    session: Session, tenant_id: str, release_id: str, epsilon_micro: int, examples: int, reason: str
) -> LedgerEntry:
    """Record that a release failed after its charge and that the charge stands (noise may have been
    drawn). Changes no spend; it makes the ledger say what happened to every charge."""
    return _append(
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
    _append(session, tenant_id, "budget_set", budget_micro, 0, api_key_id=api_key_id, note=note)


@dataclass(frozen=True)
class SpendSummary:
    examples: int
    max_spent_micro: int
    min_spent_micro: int
    can_take: int  # how many of the examples can still take the asked ε


def spend_summary(session: Session, tenant_id: str, keys: Keys, epsilon_micro: int) -> SpendSummary:
    """Spend over a set of examples (e.g. a dataset's universe); examples never charged count as 0."""
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    shards = _load(session, tenant_id, keys)
    if not shards:
        return SpendSummary(0, 0, 0, 0)
    current = np.concatenate([sh.current for sh in shards])
    limit = tenant.budget_micro - epsilon_micro
    can_take = int(np.count_nonzero(current <= limit)) if limit >= 0 else 0
    return SpendSummary(int(current.size), int(current.max()), int(current.min()), can_take)


def spend_of_tenant(session: Session, tenant_id: str) -> tuple[Keys, Keys]:
    """Every (key, micro-ε spent) pair of the tenant's examples that were ever charged."""
    rows = session.execute(
        select(ExampleSpendShard.keys, ExampleSpendShard.spent).where(
            ExampleSpendShard.tenant_id == tenant_id
        )
    ).all()
    if not rows:
        return _EMPTY, _EMPTY
    return np.concatenate([_decode(r.keys) for r in rows]), np.concatenate([_decode(r.spent) for r in rows])


def total_spent(session: Session, tenant_id: str) -> int:
    return int(spend_of_tenant(session, tenant_id)[1].sum())
