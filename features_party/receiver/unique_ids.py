"""Duplicate example IDs across a whole received message, in bounded memory.

A message can hold many chunks and billions of IDs, so the receiver never keeps a set of the IDs.
Each ID becomes a 16-byte key (BLAKE2b-128 under a random key drawn for this message: a sender cannot
aim IDs at one shard or make two IDs collide; two different IDs share a key with probability about
2^-128 per pair). Up to ``IN_MEMORY_UP_TO`` IDs the keys sit in one array sorted at the end; beyond
it they are spilled to an unlinked temporary file in the receiver's spool folder as they arrive, in
blocks of up to ``_SLICE`` keys, each block ordered by the keys' top byte (a stable sort on one byte,
while the receiver is still reading the message); at the end each of the 256 shards is gathered from
every block and sorted on its own — the idea of ``labels_party/datasets/key_pairs.py`` for uploads.
Duplicates are then neighbours. Memory: one block of keys and one shard (about n/256 × 16 bytes) and
257 offsets a block; disk: 16 bytes per ID, gone when the file closes (a crash leaves nothing either:
it has no name).
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
_SLICE = 1 << 20  # keys a spilled block holds (the last one may hold fewer; one chunk may hold more)

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
        self._n = 0
        self._memory: Keys | None = None
        self._spill: IO[bytes] | None = None
        self._pending: list[Keys] = []  # keys not yet written (fewer than _SLICE before the last chunk)
        self._pending_n = 0  # how many (counted, not summed: a message may come in many tiny chunks)
        self._blocks: list[npt.NDArray[np.int64]] = []  # per written block: where each shard starts
        if expected <= IN_MEMORY_UP_TO:
            self._memory = np.empty((expected, 2), dtype=np.uint64)
        else:
            spill_dir.mkdir(parents=True, exist_ok=True)
            self._spill = tempfile.TemporaryFile(dir=spill_dir, prefix=".ids-")  # noqa: SIM115 - close()
        self._expected = expected

    def keys(self, ids: pa.Array) -> Keys:
        """The keys of a chunk's IDs (valid, non-null text: ``decode_chunk`` checked them): one compiled
        pass that holds no lock, so another thread may compute them while this one goes on."""
        return blake2b_batch(ids, 16, key=self._key)

    def add(self, ids: pa.Array) -> None:
        """IDs in message order."""
        self.add_keys(self.keys(ids))

    def add_keys(self, keys: Keys) -> None:
        """The keys of the next chunk's IDs, in message order."""
        if self._n + keys.shape[0] > self._expected:
            raise ValueError("more IDs than the message announced")  # ChunkStream checked the counts
        if self._memory is not None:
            self._memory[self._n : self._n + keys.shape[0]] = keys
        else:
            self._pending.append(keys)
            self._pending_n += keys.shape[0]
            if self._pending_n >= _SLICE:
                self._write_block()
        self._n += keys.shape[0]

    def _write_block(self) -> None:
        """Write the pending keys as one block ordered by shard, and remember where each shard starts
        (in keys from the file's start)."""
        assert self._spill is not None
        keys = np.concatenate(self._pending)
        self._pending, self._pending_n = [], 0
        shard = (keys[:, 0] >> np.uint64(56)).astype(np.uint8)
        order = np.argsort(shard, kind="stable")  # a radix sort on one byte
        start = int(self._blocks[-1][-1]) if self._blocks else 0  # where the previous block ended
        self._blocks.append(start + np.concatenate(([0], np.cumsum(np.bincount(shard, minlength=SHARDS)))))
        self._spill.write(np.take(keys, order, axis=0).tobytes())  # take: 10× a fancy index of rows

    def repeats(self) -> int:
        """How many of the IDs added repeat an earlier one (0: all distinct)."""
        if self._memory is not None:
            return _repeats(self._memory[: self._n])
        assert self._spill is not None
        if self._pending:
            self._write_block()
        self._spill.flush()
        if not self._blocks:
            return 0
        spilled = np.memmap(self._spill, dtype=np.uint64, mode="r", shape=(int(self._blocks[-1][-1]), 2))
        found = 0
        for s in range(SHARDS):
            found += _repeats(np.concatenate([spilled[b[s] : b[s + 1]] for b in self._blocks]))
        del spilled
        return found

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
        self._memory = None
