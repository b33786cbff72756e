"""Duplicate example IDs across a whole received message, in bounded memory.

A message can hold many chunks and billions of IDs, so the receiver never keeps a set of the IDs.
Each ID becomes a 16-byte key (BLAKE2b-128 under a random key drawn for this message: a sender cannot
aim IDs at one shard or make two IDs collide; two different IDs share a key with probability about
2^-128 per pair). Up to ``IN_MEMORY_UP_TO`` IDs the keys sit in one array sorted at the end; beyond
it they are spilled to an unlinked temporary file in the receiver's spool folder, then placed into 256
shards by their top byte (a counting sort into a memory map of a second unlinked file) and each shard
is sorted on its own — the idea of ``labels_party/datasets/key_pairs.py`` for uploads. Duplicates
are then neighbours. Memory: one slice of keys and one shard (about n/256 × 24 bytes); disk: 32 bytes
per ID, gone when the files close (a crash leaves nothing either: they have no name).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from labeldp.common.blake2b_batch import blake2b_batch

IN_MEMORY_UP_TO = 4_000_000  # IDs: 64 MB of keys
SHARDS = 256
_SLICE = 1 << 20  # keys read back from the spill file at a time

Keys = npt.NDArray[np.uint64]  # (n, 2)


def _repeats(keys: Keys) -> int:
    """How many rows repeat an earlier one. Only rows whose first word occurs twice can repeat, so
    one sort of the first words finds them (with random keys: the repeats, and a chance pair) and
    only those rows are sorted whole."""
    if keys.shape[0] < 2:
        return 0
    first = np.sort(keys[:, 0])
    tied = first[1:][first[1:] == first[:-1]]
    if not tied.size:
        return 0
    rows = keys[np.isin(keys[:, 0], tied)]
    ordered = rows[np.lexsort((rows[:, 1], rows[:, 0]))]
    return int(np.all(ordered[1:] == ordered[:-1], axis=1).sum())


class UniqueIds:
    """Feed it a message's IDs chunk by chunk (``add``), then ask how many repeat (``repeats``)."""

    def __init__(self, expected: int, spill_dir: Path) -> None:
        self._key = os.urandom(16)
        self._spill_dir = spill_dir
        self._counts = np.zeros(SHARDS, dtype=np.int64)
        self._n = 0
        self._memory: Keys | None = None
        self._spill: IO[bytes] | None = None
        if expected <= IN_MEMORY_UP_TO:
            self._memory = np.empty((expected, 2), dtype=np.uint64)
        else:
            spill_dir.mkdir(parents=True, exist_ok=True)
            self._spill = tempfile.TemporaryFile(dir=spill_dir, prefix=".ids-")  # noqa: SIM115 - close()
        self._expected = expected

    def _keys(self, ids: pa.Array) -> Keys:
        return blake2b_batch(ids, 16, key=self._key)  # one compiled pass over the chunk's IDs

    def add(self, ids: pa.Array) -> None:
        """IDs in message order (valid, non-null text: ``decode_chunk`` checked them)."""
        keys = self._keys(ids)
        if self._n + keys.shape[0] > self._expected:
            raise ValueError("more IDs than the message announced")  # ChunkStream checked the counts
        self._counts += np.bincount((keys[:, 0] >> np.uint64(56)).astype(np.intp), minlength=SHARDS)
        if self._memory is not None:
            self._memory[self._n : self._n + keys.shape[0]] = keys
        else:
            assert self._spill is not None
            self._spill.write(keys.tobytes())
        self._n += keys.shape[0]

    def repeats(self) -> int:
        """How many of the IDs added repeat an earlier one (0: all distinct)."""
        if self._memory is not None:
            return _repeats(self._memory[: self._n])
        assert self._spill is not None
        self._spill.flush()
        bounds = np.concatenate(([0], np.cumsum(self._counts)))
        with tempfile.TemporaryFile(dir=self._spill_dir, prefix=".id-shards-") as backing:
            backing.truncate(max(16 * self._n, 1))
            shards = np.memmap(backing, dtype=np.uint64, mode="r+", shape=(max(self._n, 1), 2))
            filled = bounds[:-1].copy()
            self._spill.seek(0)
            while block := self._spill.read(16 * _SLICE):
                keys = np.frombuffer(block, dtype="<u8").reshape(-1, 2).astype(np.uint64)
                shard = (keys[:, 0] >> np.uint64(56)).astype(np.uint8)
                order = np.argsort(shard, kind="stable")  # a radix sort on one byte
                cuts = np.concatenate(([0], np.cumsum(np.bincount(shard, minlength=SHARDS))))
                for s in np.flatnonzero(np.diff(cuts)):
                    part = keys[order[cuts[s] : cuts[s + 1]]]
                    shards[filled[s] : filled[s] + part.shape[0]] = part
                    filled[s] += part.shape[0]
            found = sum(_repeats(np.array(shards[bounds[s] : bounds[s + 1]])) for s in range(SHARDS))
            del shards
        return found

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
        self._memory = None
