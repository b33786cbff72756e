"""The set of key pairs (ledger key, check: an example's exact identity) of one upload, in bounded memory.

Pairs are placed into one preallocated array, grouped into 256 shards by the key's top byte (the
ledger's sharding) with a counting sort, and each shard is then sorted in place on its own. Finding
duplicates and testing membership never needs a sort index over everything or a second copy: 16 bytes
per row, plus one small shard at a time.

From ``SPILL_FROM`` rows on, the array is a memory map of an unlinked temporary file beside the
upload's staging file instead of process memory: its pages are the kernel's to write back and evict,
so a billion-row upload (16 GB of key pairs) needs disk, not RAM, and the process's own (anonymous)
memory stays at one shard. The file has no name, so a crash leaves nothing behind.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from labels_party.budget.ledger_keys import Keys

SHARDS = 256
SPILL_FROM = 8_000_000  # rows (128 MB of pairs): below this the array stays in process memory


def _shard_of(keys: Keys) -> npt.NDArray[np.intp]:
    return (keys.view(np.uint64) >> np.uint64(56)).astype(np.intp)


def _array(shape: tuple[int, int], spill_dir: Path) -> npt.NDArray[np.int64]:
    if shape[0] < SPILL_FROM:
        return np.empty(shape, dtype=np.int64)
    with tempfile.TemporaryFile(dir=spill_dir, prefix=".key-pairs-") as backing:
        # the map keeps its own handle on the (already unlinked) file once this one is closed
        return np.memmap(backing, dtype=np.int64, mode="w+", shape=shape)


class KeyPairSet:
    def __init__(self, pairs: npt.NDArray[np.int64], bounds: npt.NDArray[np.int64]) -> None:
        self.pairs = pairs  # (n, 2): key, check; shard s occupies rows bounds[s]:bounds[s+1], sorted
        self.bounds = bounds

    @classmethod
    def collect(cls, batches: Callable[[], Iterable[tuple[Keys, Keys]]], spill_dir: Path) -> KeyPairSet:
        """Two passes over ``batches()``: count per shard, then place every pair in its shard."""
        counts = np.zeros(SHARDS, dtype=np.int64)
        for keys, _ in batches():
            counts += np.bincount(_shard_of(keys), minlength=SHARDS)
        bounds = np.concatenate(([0], np.cumsum(counts)))
        pairs = _array((int(bounds[-1]), 2), spill_dir)
        filled = bounds[:-1].copy()
        for keys, checks in batches():
            shard = _shard_of(keys)
            order = np.argsort(shard.astype(np.uint8), kind="stable")  # a radix sort on one byte
            cuts = np.concatenate(([0], np.cumsum(np.bincount(shard, minlength=SHARDS))))
            for index in np.flatnonzero(np.diff(cuts)):
                part = order[cuts[index] : cuts[index + 1]]
                at = int(filled[index])
                pairs[at : at + part.size, 0] = keys[part]
                pairs[at : at + part.size, 1] = checks[part]
                filled[index] += part.size
        for s in range(SHARDS):
            segment = pairs[bounds[s] : bounds[s + 1]]
            segment[:] = np.take(segment, np.lexsort((segment[:, 1], segment[:, 0])), axis=0)  # 10× rows[i]
        return cls(pairs, bounds)

    def __len__(self) -> int:
        return int(self.pairs.shape[0])

    def duplicates(self) -> tuple[Keys, Keys]:
        """The key pairs that occur more than once (shards are sorted, so twins are neighbours)."""
        found = []
        for s in range(SHARDS):
            segment = self.pairs[self.bounds[s] : self.bounds[s + 1]]
            if segment.shape[0] > 1:
                same = np.all(segment[1:] == segment[:-1], axis=1)
                if same.any():
                    found.append(segment[1:][same])
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        both = np.concatenate(found)
        return both[:, 0].copy(), both[:, 1].copy()

    def contains(self, keys: Keys, checks: Keys) -> npt.NDArray[np.bool_]:
        """Which of the given key pairs are in the set (exact on both halves)."""
        out = np.zeros(keys.size, dtype=bool)
        shard = _shard_of(keys)
        for s in np.unique(shard):
            segment = self.pairs[self.bounds[s] : self.bounds[s + 1]]
            if not segment.shape[0]:
                continue
            rows = np.flatnonzero(shard == s)
            sk, sc = segment[:, 0], segment[:, 1]
            left = np.searchsorted(sk, keys[rows], side="left")
            right = np.searchsorted(sk, keys[rows], side="right")
            single = right - left == 1
            hit = np.zeros(rows.size, dtype=bool)
            hit[single] = sc[left[single]] == checks[rows][single]
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
