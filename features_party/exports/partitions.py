"""Which example IDs of a feature table have a released label, and which bin: a hash join in bounded
memory, exact by construction.

Both sides are cut into partitions by a hash of each ID's bytes (random per export, so no one can aim
IDs at one partition), spilled to unnamed temporary files, and each partition pair is then matched
exactly by Arrow's ``index_in`` (the IDs' text, never their hash, decides a match). Memory: one
partition of each side (``PARTITION_ROWS``) and two bytes per exported row; disk: the two ID columns
once, gone when the files close (they have no name, so a crash leaves nothing either). Below
``IN_MEMORY_UP_TO`` rows on both sides together, everything stays in memory in one partition.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.common.files import open_parquet_for_batches, parquet_batches

MISSING = np.uint16(0xFFFF)  # no released label: bin codes are at most 65,534 (MAX_BINS, the capped code)
PARTITION_ROWS = 1_000_000
IN_MEMORY_UP_TO = 2_000_000
MAX_PARTITIONS = 256
SPILL_BINS_FROM = 32_000_000  # exported rows: beyond, their bins live in a memory-mapped unnamed file
_READ_ROWS = 65_536
_MAX_ID_BYTES = 256


class IdHash:
    """A 64-bit hash of each ID's UTF-8 bytes, vectorized over an Arrow string array: a sum of the
    bytes times random odd multipliers per position, then mixed; drawn anew for every export."""

    def __init__(self) -> None:
        self.multipliers = np.frombuffer(os.urandom(8 * _MAX_ID_BYTES), dtype=np.uint64) | np.uint64(1)

    def __call__(self, ids: pa.Array) -> npt.NDArray[np.uint64]:
        ids = pc.cast(ids, pa.large_binary()) if ids.type != pa.large_binary() else ids
        n = len(ids)
        offsets = np.frombuffer(ids.buffers()[1], dtype=np.int64, count=n + 1, offset=8 * ids.offset)
        start, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
        data = np.frombuffer(ids.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].astype(np.uint64)
        position = np.arange(data.size) - np.repeat(start, lengths)
        with np.errstate(over="ignore"):
            terms = (data + np.uint64(1)) * self.multipliers[np.minimum(position, _MAX_ID_BYTES - 1)]
            h = np.zeros(n, dtype=np.uint64)
            filled = lengths > 0
            h[filled] = np.add.reduceat(terms, start[filled]) if data.size else 0
            h ^= lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(31)
            h *= np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(29)
        return h

    def partition(self, ids: pa.Array, parts: int) -> npt.NDArray[np.intp]:
        return (self(ids) % np.uint64(parts)).astype(np.intp)


def _bins_array(rows: int, stack: ExitStack, spill_dir: Path) -> npt.NDArray[np.uint16]:
    if rows < SPILL_BINS_FROM:
        return np.full(rows, MISSING, dtype=np.uint16)
    backing = stack.enter_context(tempfile.TemporaryFile(dir=spill_dir, prefix=".export-bins-"))  # noqa: SIM115
    array = np.memmap(backing, dtype=np.uint16, mode="w+", shape=(rows,))
    array[:] = MISSING
    return array


class _Spill:
    """One side's partitions: an Arrow IPC stream per partition, in unnamed temporary files."""

    def __init__(self, schema: pa.Schema, parts: int, spill_dir: Path, stack: ExitStack) -> None:
        self.schema = schema
        self.files: list[IO[bytes]] = [
            stack.enter_context(tempfile.TemporaryFile(dir=spill_dir, prefix=".export-"))  # noqa: SIM115
            for _ in range(parts)
        ]
        self.writers = [pa.ipc.new_stream(f, schema) for f in self.files]

    def add(self, table: pa.Table, part: npt.NDArray[np.intp]) -> None:
        order = np.argsort(part, kind="stable")
        cuts = np.searchsorted(part[order], np.arange(len(self.files) + 1))
        for p in np.flatnonzero(np.diff(cuts)):
            self.writers[p].write_table(table.take(pa.array(order[cuts[p] : cuts[p + 1]])))

    def finish(self) -> None:
        for w in self.writers:
            w.close()

    def read(self, p: int) -> pa.Table:
        self.files[p].seek(0)
        return pa.ipc.open_stream(self.files[p]).read_all()


def _release_batches(release_file: Path, column: str = "bin") -> Iterator[pa.RecordBatch]:
    """The release's IDs and, as uint16 codes named ``bin``: its bins, or (``column="group"``) each
    example's group + 1 (0: no group) — below ``MISSING`` either way."""
    for batch in parquet_batches(open_parquet_for_batches(release_file), _READ_ROWS, ["example_id", column]):
        if column == "bin":
            yield batch
        else:
            codes = pc.cast(pc.add(pc.cast(batch.column(1), pa.int32()), 1), pa.uint16())
            yield pa.record_batch([batch.column(0), codes], names=["example_id", "bin"])


def released_bins(
    release_file: Path,
    feature_ids: Iterator[pa.Array],
    rows: int,
    spill_dir: Path,
    stack: ExitStack,
    column: str = "bin",
) -> npt.NDArray[np.uint16]:
    """The released bin code of each of ``rows`` feature rows (their IDs in order, in pieces), or
    ``MISSING``; with ``column="group"`` (a feature-aware release) its group + 1 instead (0: none).
    Temporary files and the result's backing live as long as ``stack``."""
    release_rows = pq.ParquetFile(release_file).metadata.num_rows
    out = _bins_array(rows, stack, spill_dir)
    if release_rows + rows <= IN_MEMORY_UP_TO:
        ids = pa.concat_arrays([pa.array([], pa.string()), *(pc.cast(i, pa.string()) for i in feature_ids)])
        release = pa.Table.from_batches(list(_release_batches(release_file, column)))
        _match(release, pa.table({"example_id": ids, "row": pa.array(np.arange(len(ids)))}), out)
        return out
    parts = min(MAX_PARTITIONS, max(2, math.ceil(max(release_rows, rows) / PARTITION_ROWS)))
    spill_dir.mkdir(parents=True, exist_ok=True)
    hashing = IdHash()
    release = _Spill(pa.schema([("example_id", pa.string()), ("bin", pa.uint16())]), parts, spill_dir, stack)
    for batch in _release_batches(release_file, column):
        release.add(pa.Table.from_batches([batch]), hashing.partition(batch.column(0), parts))
    release.finish()
    features = _Spill(pa.schema([("example_id", pa.string()), ("row", pa.int64())]), parts, spill_dir, stack)
    seen = 0
    for piece in feature_ids:
        ids = pc.cast(piece, pa.string())
        rows_of = pa.array(np.arange(seen, seen + len(ids), dtype=np.int64))
        features.add(pa.table({"example_id": ids, "row": rows_of}), hashing.partition(ids, parts))
        seen += len(ids)
    features.finish()
    for p in range(parts):
        _match(release.read(p), features.read(p), out)
    return out


def _match(release: pa.Table, features: pa.Table, out: npt.NDArray[np.uint16]) -> None:
    """``out[row] = bin`` for every feature row whose ID the release has (IDs are unique on each side)."""
    if not len(release) or not len(features):
        return
    position = pc.index_in(features.column("example_id"), value_set=release.column("example_id"))
    at = np.asarray(pc.fill_null(position, -1).to_numpy(), dtype=np.int64)
    hit = at >= 0
    if not hit.any():
        return
    at = at[hit]
    bins = release.column("bin").to_numpy()
    out[features.column("row").to_numpy()[hit]] = bins[at]
