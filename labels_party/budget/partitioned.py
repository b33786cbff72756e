"""The ledger charge of a release too large for one process: merging and checking run on a cluster,
one database commit decides.

1. **Stage** (workers, per input partition, no lock): sort the partition's example keys and user keys
   in shard order into raw files and return where each of the 256 shards starts.
2. **Read** (here, no lock): the tenant's ``ledger_version`` *first*, then its budgets and the rows of
   the shards the release touches.
3. **Merge and check** (workers, per touched shard): gather the shard's keys from every partition's
   sorted file, add the charge to the shard's spend, count the examples (users) the budget cannot take;
   if none, write the merged shard as a new, immutable segment file (``segments.py``).
4. **Commit** (here, one transaction): ``UPDATE tenants SET ledger_version = v + 1 WHERE id = t AND
   ledger_version = v``, then the caller's release row, the shard rows repointed at the new
   segments and the ledger entry. If the update matched no row, another change committed since step
   2: nothing becomes visible, the new files are removed and the charge starts again at step 2.

Why no interleaving can overspend: every change to a tenant's spend or budgets bumps the version in
the transaction that makes it (``ledger.charge``, ``set_budget``, this commit). The version is read
before the shards, so a shard state read in step 2 is at least as new as version ``v``; if it is
newer, the version has moved and step 4 fails. A commit therefore replaces exactly the state its
check saw, and two charges cannot both replace version ``v`` — the conditional update is the one
serialization point (on PostgreSQL the second waits for the first's row lock, then re-evaluates the
condition and matches nothing). Noise is drawn only after step 4 commits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq
from sqlalchemy import CursorResult, insert, select, update
from sqlalchemy.orm import Session

from labeldp.scale import Engine
from labels_party.budget.errors import (
    BudgetExhaustedError,
    LedgerContentionError,
    Spent,
    UnknownTenantError,
    UserBudgetExhaustedError,
)
from labels_party.budget.ledger import Ledger, append_entry
from labels_party.budget.ledger_keys import Keys, distinct
from labels_party.budget.segments import SegmentStore, segment_name, write_segment
from labels_party.budget.shards import SHARDS, Shard, StoredShard, added, shard_state, stored_shards
from labels_party.budget.summaries import SpendHistogram
from labels_party.storage.orm import ExampleSpendShard, LedgerEntry, SpendShard, Tenant, UserSpendShard

KEY_COLUMN = "key"
USER_COLUMN = "user_key"
MAX_ATTEMPTS = 5
_EMPTY = np.zeros(0, dtype=np.int64)
_RAW = np.dtype("<u8")  # the staged files: sorted keys as raw little-endian unsigned 64-bit integers


@dataclass(frozen=True)
class SortedKeys:
    """One partition's keys in shard order: shard ``s`` is ``[bounds[s], bounds[s + 1])``."""

    path: str
    bounds: list[int]


@dataclass(frozen=True)
class StagedKeys:
    examples: list[SortedKeys]
    users: list[SortedKeys]

    def touched(self, users: bool) -> list[int]:
        parts = self.users if users else self.examples
        return [s for s in range(SHARDS) if any(p.bounds[s + 1] > p.bounds[s] for p in parts)]


def sort_keys(part: str, column: str, out: str) -> SortedKeys:
    """Step 1 on a worker: one partition's keys of ``column``, sorted as unsigned (shard = top byte)."""
    keys = np.asarray(pq.read_table(part, columns=[column]).column(column).to_numpy(), dtype=np.int64)
    ordered = np.sort(keys.view(np.uint64)).astype(_RAW, copy=False)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    ordered.tofile(out)
    shard = (ordered >> np.uint64(56)).astype(np.int64)
    return SortedKeys(out, np.searchsorted(shard, np.arange(SHARDS + 1)).tolist())


def stage_keys(engine: Engine, parts: Sequence[str], folder: Path) -> StagedKeys:
    """Step 1 for every partition (Parquet files with ``key`` and ``user_key`` columns)."""
    n = len(parts)
    examples = engine.map(
        sort_keys, list(parts), [KEY_COLUMN] * n, [str(folder / f"keys-{i:05d}.u64") for i in range(n)]
    )
    users = engine.map(
        sort_keys, list(parts), [USER_COLUMN] * n, [str(folder / f"users-{i:05d}.u64") for i in range(n)]
    )
    return StagedKeys(examples, users)


@dataclass(frozen=True)
class Merged:
    shard: int
    requested: int  # distinct keys of the release in this shard
    lacking: int  # of them, how many the budget cannot take
    most: int  # the largest amount charged to one key
    segment: str | None  # the new segment's file name (None when lacking, or nothing to write)
    sha256: str | None


def _staged(part: SortedKeys, shard: int) -> npt.NDArray[np.uint64]:
    """One shard's keys of one staged partition, read by offset. A short file would charge fewer keys
    than the release lists: refused."""
    start, end = part.bounds[shard], part.bounds[shard + 1]
    keys = np.fromfile(part.path, dtype=_RAW, offset=8 * start, count=end - start)
    if keys.size != end - start:
        raise RuntimeError(f"the staged keys {Path(part.path).name} end early: {keys.size} of {end - start}")
    return keys


def _shard_charge(
    shard: int, stored: StoredShard | None, parts: list[SortedKeys], amount: int, per_occurrence: bool
) -> tuple[Shard, Keys]:
    """A shard's state for the release's keys in it, and the amount each is charged: ``amount`` per
    distinct key (examples), or ``amount`` times its occurrences (users: ε per example of the user)."""
    # raw keys read by offset: no .npy header to parse (CPython before 3.11.8 can fail parsing one in a
    # thread while a garbage-collector callback runs — gh-106905 — as charges on parallel threads did)
    pieces = [_staged(p, shard) for p in parts]
    # within one shard the top byte is fixed, so unsigned and signed order agree
    query = np.sort(np.concatenate(pieces).astype(np.uint64, copy=False)).view(np.int64) if pieces else _EMPTY
    if per_occurrence:
        query, counts = np.unique(query, return_counts=True)
        amounts = counts.astype(np.int64) * amount
    else:
        query = distinct(query)
        amounts = np.full(query.size, amount, dtype=np.int64)
    keys, spent = stored.arrays() if stored is not None else (_EMPTY, _EMPTY)
    return shard_state(shard, keys, spent, stored is not None, query), amounts


def merge_shard(
    shard: int,
    stored: StoredShard | None,
    out: str,
    *,
    parts: list[SortedKeys],
    amount: int,
    per_occurrence: bool,
    limit: int | None,
) -> Merged:
    """Step 3 on a worker. A key may take its charge iff its spend plus the charge stays within
    ``limit`` (None: no limit). The new segment is written only if all can."""
    state, amounts = _shard_charge(shard, stored, parts, amount, per_occurrence)
    most = int(amounts.max()) if amounts.size else 0
    lacking = 0 if limit is None else int(np.count_nonzero(state.current + amounts > limit))
    if lacking or not state.query.size:
        return Merged(shard, int(state.query.size), lacking, most, None, None)
    ((_, new_keys, new_spent),) = added([state], lambda _: amounts)
    return Merged(
        shard, int(state.query.size), 0, most, Path(out).name, write_segment(Path(out), new_keys, new_spent)
    )


def spent_in_shard(
    shard: int, stored: StoredShard | None, *, parts: list[SortedKeys], per_occurrence: bool
) -> SpendHistogram:
    """After a refusal, on a worker: what the release's keys in one shard have spent."""
    state, _ = _shard_charge(shard, stored, parts, 0, per_occurrence)
    return SpendHistogram.of(state.current)


def _spent(
    engine: Engine, shards: list[int], stored: dict[int, StoredShard], parts: list[SortedKeys], users: bool
) -> Spent:
    """What a refused charge's examples (users) have spent, as the refusal tells it."""
    histograms = engine.map(
        spent_in_shard, shards, [stored.get(s) for s in shards], parts=parts, per_occurrence=users
    )
    return SpendHistogram.merged(histograms).spent()


def _merge(
    engine: Engine,
    store: SegmentStore,
    tenant_id: str,
    kind: str,
    shards: list[int],
    stored: dict[int, StoredShard],
    written: list[str],
    **shared: object,
) -> list[Merged]:
    """Step 3 for one kind of key; the names of the segments written are added to ``written``."""
    outs = [str(store.path(segment_name(kind, tenant_id, s))) for s in shards]
    store.root.mkdir(parents=True, exist_ok=True)
    merged: list[Merged] = engine.map(merge_shard, shards, [stored.get(s) for s in shards], outs, **shared)
    written.extend(m.segment for m in merged if m.segment)
    return merged


def _repoint(
    session: Session, tenant_id: str, model: SpendShard, merged: list[Merged], stored: dict[int, StoredShard]
) -> None:
    updates = [
        {
            "tenant_id": tenant_id,
            "shard": m.shard,
            "keys": b"",
            "spent": b"",
            "segment": m.segment,
            "segment_sha256": m.sha256,
        }
        for m in merged
        if m.segment is not None
    ]
    old = [u for u in updates if u["shard"] in stored]
    new = [u for u in updates if u["shard"] not in stored]
    if old:
        session.execute(update(model), old)
    if new:
        session.execute(insert(model), new)


class _LostRaceError(Exception):
    """The tenant's ledger version moved between step 2 and step 4."""


def charge_partitioned(
    ledger: Ledger,
    engine: Engine,
    tenant_id: str,
    staged: StagedKeys,
    epsilon_micro: int,
    *,
    inside: Callable[[Session], None],
    release_id: str | None,
    api_key_id: str | None,
    note: str = "",
    attempts: int = MAX_ATTEMPTS,
) -> LedgerEntry:
    """Charge ``epsilon_micro`` to every staged example and ε per example to every staged user, or raise
    ``BudgetExhaustedError`` / ``UserBudgetExhaustedError`` having changed nothing. ``inside`` runs
    in the committing transaction (the release row: a release and its charge commit together), after
    the conditional update has taken the tenant's row: the same lock order as ``Ledger.transaction``."""
    sessions, store = ledger.sessions, ledger.segments
    if epsilon_micro <= 0:
        raise ValueError("epsilon_micro must be positive")
    example_shards, user_shards = staged.touched(users=False), staged.touched(users=True)
    for _ in range(attempts):
        with sessions() as session:
            tenant = session.get(Tenant, tenant_id)  # the version first, then the shards
            if tenant is None:
                raise UnknownTenantError(tenant_id)
            version, budget, user_budget = (
                tenant.ledger_version,
                tenant.budget_micro,
                tenant.user_budget_micro,
            )
            stored_examples = stored_shards(session, tenant_id, ExampleSpendShard, example_shards, store)
            stored_users = stored_shards(session, tenant_id, UserSpendShard, user_shards, store)
        written: list[str] = []
        try:
            examples = _merge(
                engine, store, tenant_id, "example", example_shards, stored_examples, written,
                parts=staged.examples, amount=epsilon_micro, per_occurrence=False, limit=budget,
            )  # fmt: skip
            requested = sum(m.requested for m in examples)
            lacking = sum(m.lacking for m in examples)
            if lacking:
                spent = _spent(engine, example_shards, stored_examples, staged.examples, users=False)
                raise BudgetExhaustedError(lacking, requested, epsilon_micro, budget, spent)
            users = _merge(
                engine, store, tenant_id, "user", user_shards, stored_users, written,
                parts=staged.users, amount=epsilon_micro, per_occurrence=True, limit=user_budget,
            )  # fmt: skip
            over, user_count = sum(m.lacking for m in users), sum(m.requested for m in users)
            most = max((m.most for m in users), default=0)
            if over:
                assert user_budget is not None
                spent = _spent(engine, user_shards, stored_users, staged.users, users=True)
                raise UserBudgetExhaustedError(over, user_count, most, user_budget, spent)
            with sessions.begin() as session:
                result: CursorResult[object] = session.execute(  # type: ignore[assignment]
                    update(Tenant)
                    .where(Tenant.id == tenant_id, Tenant.ledger_version == version)
                    .values(ledger_version=version + 1)
                )
                if result.rowcount != 1:
                    raise _LostRaceError
                inside(session)
                _repoint(session, tenant_id, ExampleSpendShard, examples, stored_examples)
                _repoint(session, tenant_id, UserSpendShard, users, stored_users)
                return append_entry(
                    session,
                    tenant_id,
                    "charge",
                    epsilon_micro,
                    requested,
                    users=user_count,
                    user_epsilon_micro=most or None,
                    release_id=release_id,
                    api_key_id=api_key_id,
                    note=note,
                )
        except _LostRaceError:
            store.remove(written)
            continue
        except (BudgetExhaustedError, UserBudgetExhaustedError):
            store.remove(written)  # refused before the transaction: nothing can name these files
            raise
        # Any other failure leaves the files to garbage collection: had the commit itself gone through
        # unseen, deleting them would lose spend, while an unnamed file only waits for the collector.
    raise LedgerContentionError(attempts)


def referenced_segments(session: Session) -> set[str]:
    """Every segment file a shard row names (what ``SegmentStore.collect_garbage`` keeps)."""
    names: set[str] = set()
    for model in (ExampleSpendShard, UserSpendShard):
        rows = session.execute(select(model.segment).where(model.segment.is_not(None))).scalars()
        names.update(name for name in rows if name is not None)
    return names
