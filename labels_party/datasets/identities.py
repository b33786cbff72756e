"""The set of example identities (ledger key, check) of one upload, held in bounded memory.

Pairs are bucketed into 256 shards by the key's top byte — the same sharding as the ledger — and
each shard is sorted on its own, so finding duplicates and testing membership never needs a sort
index or a second copy of all pairs: 16 bytes per row, plus one small shard at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from labels_party.budget.keys import Keys

SHARDS = 256


def _shard_of(keys: Keys) -> npt.NDArray[np.intp]:
    return (keys.view(np.uint64) >> np.uint64(56)).astype(np.intp)


class IdentitySet:
    def __init__(self, keys: list[Keys], checks: list[Keys]) -> None:
        self.keys, self.checks = keys, checks

    @classmethod
    def collect(cls, batches: Callable[[], Iterable[tuple[Keys, Keys]]]) -> IdentitySet:
        """Two passes over ``batches()``: count per shard, then fill preallocated shards and sort."""
        counts = np.zeros(SHARDS, dtype=np.int64)
        for keys, _ in batches():
            counts += np.bincount(_shard_of(keys), minlength=SHARDS)
        shard_keys = [np.empty(int(c), dtype=np.int64) for c in counts]
        shard_checks = [np.empty(int(c), dtype=np.int64) for c in counts]
        filled = np.zeros(SHARDS, dtype=np.int64)
        for keys, checks in batches():
            shard = _shard_of(keys)
            order = np.argsort(shard, kind="stable")
            bounds = np.searchsorted(shard[order], np.arange(SHARDS + 1))
            for index in np.flatnonzero(np.diff(bounds)):
                part = order[bounds[index] : bounds[index + 1]]
                at = int(filled[index])
                shard_keys[index][at : at + part.size] = keys[part]
                shard_checks[index][at : at + part.size] = checks[part]
                filled[index] += part.size
        for s in range(SHARDS):
            by_identity = np.lexsort((shard_checks[s], shard_keys[s]))
            shard_keys[s] = shard_keys[s][by_identity]
            shard_checks[s] = shard_checks[s][by_identity]
        return cls(shard_keys, shard_checks)

    def __len__(self) -> int:
        return int(sum(k.size for k in self.keys))

    def duplicates(self) -> tuple[Keys, Keys]:
        """The identities that occur more than once."""
        dup_keys, dup_checks = [], []
        for k, c in zip(self.keys, self.checks, strict=True):
            if k.size < 2:
                continue
            same = (k[1:] == k[:-1]) & (c[1:] == c[:-1])
            if same.any():
                dup_keys.append(k[1:][same])
                dup_checks.append(c[1:][same])
        if not dup_keys:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(dup_keys), np.concatenate(dup_checks)

    def contains(self, keys: Keys, checks: Keys) -> npt.NDArray[np.bool_]:
        """Which of the given identities are in the set (exact on both halves)."""
        out = np.zeros(keys.size, dtype=bool)
        shard = _shard_of(keys)
        for s in np.unique(shard):
            rows = np.flatnonzero(shard == s)
            sk, sc = self.keys[s], self.checks[s]
            if not sk.size:
                continue
            left = np.searchsorted(sk, keys[rows], side="left")
            right = np.searchsorted(sk, keys[rows], side="right")
            single = right - left == 1
            hit = np.zeros(rows.size, dtype=bool)
            idx = left[single]
            hit[single] = sc[idx] == checks[rows][single]
            for j in np.flatnonzero(right - left > 1):  # equal ledger keys: compare every check
                hit[j] = bool(np.any(sc[left[j] : right[j]] == checks[rows[j]]))
            out[rows] = hit
        return out


def matching_rows(keys: Keys, checks: Keys, wanted_keys: Keys, wanted_checks: Keys) -> npt.NDArray[np.bool_]:
    """Rows whose identity is one of a (small) wanted set."""
    wanted = set(zip(wanted_keys.tolist(), wanted_checks.tolist(), strict=True))
    candidates = np.isin(keys, wanted_keys)
    out = np.zeros(keys.size, dtype=bool)
    for i in np.flatnonzero(candidates):
        out[i] = (int(keys[i]), int(checks[i])) in wanted
    return out
