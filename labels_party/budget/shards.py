"""The ledger's storage format: a tenant's spend as 256 shards per kind (examples, users) by the top
byte of the 64-bit key, each a pair of sorted int64 arrays (keys, micro-ε spent) held in its database
row or, after a partitioned charge, in an immutable segment file (``segments.py``).

A charge reads the shards it touches, checks and adds with exact int64 arithmetic, and writes them
back: a million examples cost a few megabytes of I/O rather than a million row and index updates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from labels_party.budget.ledger_keys import Keys, distinct
from labels_party.budget.segments import SegmentStore, read_segment
from labels_party.storage.orm import ExampleSpendShard, SpendShard

SHARDS = 256


EMPTY = np.zeros(0, dtype=np.int64)


def decode(blob: bytes) -> Keys:
    return np.frombuffer(blob, dtype="<i8").astype(np.int64)


def encode(values: Keys) -> bytes:
    return values.astype("<i8").tobytes()


def by_shard(keys: Keys) -> tuple[Keys, npt.NDArray[np.intp]]:
    """Distinct keys ordered so that each shard's keys are contiguous and sorted, plus the shard
    boundaries. (The shard is the key's top byte; within one shard signed and unsigned order agree.)"""
    ordered = distinct(np.asarray(keys, dtype=np.int64).view(np.uint64)).view(np.int64)  # unsigned order
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


def load_shards(
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
        shard_state(s, *stored.get(s, (EMPTY, EMPTY)), s in stored, ordered[bounds[s] : bounds[s + 1]])
        for s in touched
    ]


def shard_state(index: int, keys: Keys, spent: Keys, stored: bool, query: Keys) -> Shard:
    """Where a shard's sorted query keys are in its stored (sorted) keys."""
    position = np.searchsorted(keys, query)
    found = position < keys.size
    found[found] = keys[position[found]] == query[found]
    return Shard(index, keys, spent, stored, query, position, found)


def save_shards(
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
                "keys": encode(k),
                "spent": encode(v),
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
