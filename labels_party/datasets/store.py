"""Versioned Parquet files of a dataset's labels and universe, written atomically and merged a batch
at a time.

A new version is written to a temporary file, fsynced and renamed; only then does the database row
point at it. A crash at any moment leaves the previous version in force (at worst an orphan file,
removed at the next start).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.files import (
    fsync_directory,
    parquet_batches,
    release_arrow_memory,
    write_parquet_atomic,
)
from labels_party.budget.ledger_keys import key_pairs
from labels_party.datasets.key_pairs import KeyPairSet
from labels_party.storage.data_dir import DataDir

LABEL_SCHEMA = pa.schema(
    [
        ("example_id", pa.string()),
        ("label", pa.float64()),
        ("user_id", pa.string()),
        ("example_key", pa.int64()),  # ledger key (BLAKE2b-64 of the ID)
        ("example_check", pa.int64()),  # second hash: (key, check) is the example's exact identity
    ]
)
UNIVERSE_SCHEMA = pa.schema(
    [
        ("example_id", pa.string()),
        ("user_id", pa.string()),  # each example's user (null: its own); files before 0.3 lack it
        ("example_key", pa.int64()),
        ("example_check", pa.int64()),
    ]
)
MERGE_BATCH_ROWS = 262_144
_UNIQUE = frozenset({"example_id", "example_key", "example_check"})


def writer_options(schema: pa.Schema) -> dict[str, object]:
    """Parquet options for a stored file: no dictionary for the columns unique to each row (an ID, its
    two hashes), where pyarrow would build one until it overflows and then write them plain anyway
    (a third of the write time, and a larger file)."""
    return {"use_dictionary": [name for name in schema.names if name not in _UNIQUE]}


class DatasetFiles:
    """One dataset's versioned files (their paths are the ``DataDir``'s)."""

    def __init__(self, data_dir: DataDir, dataset_id: str) -> None:
        self.data_dir, self.dataset_id = data_dir, dataset_id

    def labels_path(self, version: int) -> Path:
        return self.data_dir.labels(self.dataset_id, version)

    def universe_path(self, version: int) -> Path:
        return self.data_dir.universe(self.dataset_id, version)

    def non_sensitive_path(self, version: int) -> Path:
        return self.data_dir.non_sensitive(self.dataset_id, version)

    def staging_path(self) -> Path:
        return self.data_dir.staging(self.dataset_id)

    def read_labels(self, version: int, columns: list[str] | None = None) -> pa.Table:
        """A labels version (``columns``: only those, e.g. to avoid reading labels at all)."""
        if version == 0:
            empty = LABEL_SCHEMA.empty_table()
            return empty if columns is None else empty.select(columns)
        return pq.read_table(self.labels_path(version), columns=columns)

    def read_universe(self, version: int) -> pa.Table | None:
        return None if version == 0 else pq.read_table(self.universe_path(version))

    def write(self, path: Path, table: pa.Table) -> None:
        write_parquet_atomic(path, table)

    @staticmethod
    def make_durable(staged: Path) -> None:
        """fsync a fully written file (the slow part of publishing: done before any lock is taken)."""
        with open(staged, "rb") as fh:
            os.fsync(fh.fileno())

    @staticmethod
    def rename_into_place(staged: Path, final: Path) -> None:
        """Rename a durable file to its version's name and make the rename durable."""
        os.replace(staged, final)
        fsync_directory(final.parent)


def _with_checks(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
    """A stored batch in the current schema, with its identity (older files lack the check column)."""
    keys = np.asarray(batch.column("example_key").to_numpy(), dtype=np.int64)
    if "example_check" in batch.schema.names:
        checks = np.asarray(batch.column("example_check").to_numpy(), dtype=np.int64)
    else:
        _, checks = key_pairs(batch.column("example_id"))
        batch = batch.append_column("example_check", pa.array(checks, pa.int64()))
    return batch, keys, checks


def merge_labels(
    existing: Path, upload: Path, replaced: KeyPairSet, out: Path, schema: pa.Schema = LABEL_SCHEMA
) -> int:
    """Write ``out``: the existing rows the upload does not replace (same identity), then the upload's
    rows, in ``schema`` (the dataset's: label columns and declared semi-sensitive ones). Streams both
    files; returns the number of rows written. (A dataset's first upload has nothing to merge with:
    its validated file becomes the version as it is.)"""
    rows = 0
    with pq.ParquetWriter(out, schema, **writer_options(schema)) as writer:
        for batch in parquet_batches(pq.ParquetFile(existing), MERGE_BATCH_ROWS):
            full, keys, checks = _with_checks(batch)
            kept = full.filter(pa.array(~replaced.contains(keys, checks)))
            writer.write_table(pa.Table.from_batches([kept]).select(schema.names).cast(schema))
            rows += kept.num_rows
            release_arrow_memory()
        for batch in parquet_batches(pq.ParquetFile(upload), MERGE_BATCH_ROWS):
            writer.write_table(pa.Table.from_batches([batch]).cast(schema))
            rows += batch.num_rows
            release_arrow_memory()
    return rows
