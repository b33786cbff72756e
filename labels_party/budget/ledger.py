"""The privacy-budget ledger: exact, atomic check-and-charge per (tenant, example).

``charge`` runs inside the caller's transaction, so a release row and its charge commit together or
not at all. It holds the tenant's write lock while it checks and updates, so concurrent charges for
one tenant serialize and can never overspend; charges for different tenants do not wait on each
other (on PostgreSQL). Every call appends a ``LedgerEntry``; nothing is ever deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from labels_party.storage.models import ExampleSpend, LedgerEntry, Tenant

Keys = npt.NDArray[np.int64]
_SQLITE_BATCH = 50_000


class UnknownTenantError(LookupError):
    pass


@dataclass
class BudgetExhaustedError(Exception):
    """The charge would take ``lacking`` of the ``requested`` examples over the per-example budget."""

    lacking: int
    requested: int
    epsilon_micro: int
    budget_micro: int

    def __str__(self) -> str:
        return (
            f"{self.lacking} of {self.requested} examples lack budget for ε = {self.epsilon_micro / 1e6:g} "
            f"(per-example budget {self.budget_micro / 1e6:g})"
        )


def lock_tenant(session: Session, tenant_id: str) -> Tenant:
    """Load the tenant and hold its write lock until the transaction ends."""
    stmt = select(Tenant).where(Tenant.id == tenant_id)
    if session.get_bind().dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    tenant = session.execute(stmt).scalar_one_or_none()
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    return tenant


def _stage(session: Session, keys: Keys) -> None:
    """Load the keys into a transaction-local table ``charge_keys(k)`` in bulk."""
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql("CREATE TEMP TABLE charge_keys (k BIGINT PRIMARY KEY) ON COMMIT DROP")
        raw = conn.connection.driver_connection
        payload = ("\n".join(map(str, keys.tolist())) + "\n").encode() if keys.size else b""
        with raw.cursor() as cur, cur.copy("COPY charge_keys (k) FROM STDIN") as copy:  # type: ignore[union-attr]
            copy.write(payload)
        conn.exec_driver_sql("ANALYZE charge_keys")
    else:
        conn.exec_driver_sql("CREATE TEMP TABLE charge_keys (k INTEGER PRIMARY KEY)")
        dbapi = conn.connection.driver_connection
        values = keys.tolist()
        for start in range(0, len(values), _SQLITE_BATCH):
            dbapi.executemany(  # type: ignore[union-attr]
                "INSERT INTO charge_keys (k) VALUES (?)",
                [(v,) for v in values[start : start + _SQLITE_BATCH]],
            )


def _unstage(session: Session) -> None:
    session.connection().exec_driver_sql("DROP TABLE IF EXISTS charge_keys")


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
    keys = np.unique(np.asarray(keys, dtype=np.int64))
    tenant = lock_tenant(session, tenant_id)
    limit = tenant.budget_micro - epsilon_micro  # an example may be charged iff spent <= limit
    if limit < 0:
        raise BudgetExhaustedError(int(keys.size), int(keys.size), epsilon_micro, tenant.budget_micro)
    _stage(session, keys)
    try:
        lacking = session.execute(
            text(
                "SELECT count(*) FROM charge_keys c JOIN example_spend s "
                "ON s.tenant_id = :t AND s.example_key = c.k WHERE s.spent_micro > :limit"
            ),
            {"t": tenant_id, "limit": limit},
        ).scalar_one()
        if lacking:
            raise BudgetExhaustedError(int(lacking), int(keys.size), epsilon_micro, tenant.budget_micro)
        session.execute(
            text(
                "INSERT INTO example_spend (tenant_id, example_key, spent_micro) "
                "SELECT :t, k, :x FROM charge_keys WHERE true "
                "ON CONFLICT (tenant_id, example_key) "
                "DO UPDATE SET spent_micro = example_spend.spent_micro + excluded.spent_micro"
            ),
            {"t": tenant_id, "x": epsilon_micro},
        )
    finally:
        _unstage(session)
    return _append(
        session,
        tenant_id,
        "charge",
        epsilon_micro,
        int(keys.size),
        release_id=release_id,
        api_key_id=api_key_id,
        note=note,
    )


def release_charge(
    session: Session,
    tenant_id: str,
    keys: Keys,
    epsilon_micro: int,
    *,
    release_id: str,
    api_key_id: str | None,
    reason: str,
) -> LedgerEntry:
    """Give back a charge whose release failed **before any noise was drawn** (the only case where
    returning budget is sound). Recorded as its own ledger entry; the charge entry stays."""
    keys = np.unique(np.asarray(keys, dtype=np.int64))
    lock_tenant(session, tenant_id)
    _stage(session, keys)
    try:
        session.execute(
            text(
                "UPDATE example_spend SET spent_micro = spent_micro - :x "
                "WHERE tenant_id = :t AND example_key IN (SELECT k FROM charge_keys)"
            ),
            {"t": tenant_id, "x": epsilon_micro},
        )
    finally:
        _unstage(session)
    return _append(
        session,
        tenant_id,
        "charge_released",
        epsilon_micro,
        int(keys.size),
        release_id=release_id,
        api_key_id=api_key_id,
        note=reason,
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
    keys = np.unique(np.asarray(keys, dtype=np.int64))
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise UnknownTenantError(tenant_id)
    _stage(session, keys)
    try:
        row = session.execute(
            text(
                "SELECT count(s.example_key), coalesce(max(s.spent_micro), 0), "
                "coalesce(min(s.spent_micro), 0), count(CASE WHEN s.spent_micro > :limit THEN 1 END) "
                "FROM charge_keys c JOIN example_spend s ON s.tenant_id = :t AND s.example_key = c.k"
            ),
            {"t": tenant_id, "limit": tenant.budget_micro - epsilon_micro},
        ).one()
    finally:
        _unstage(session)
    charged, max_spent, min_spent, over = (int(v) for v in row)
    total = int(keys.size)
    never_charged = total - charged
    can_take = (total - over) if epsilon_micro <= tenant.budget_micro else 0
    return SpendSummary(total, max_spent, 0 if never_charged else min_spent, can_take)


def total_spent(session: Session, tenant_id: str) -> int:
    return int(
        session.execute(
            select(func.coalesce(func.sum(ExampleSpend.spent_micro), 0)).where(
                ExampleSpend.tenant_id == tenant_id
            )
        ).scalar_one()
    )
