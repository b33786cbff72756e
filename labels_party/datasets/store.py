"""Versioned Parquet files of a dataset's labels and universe, written atomically.

A new version is written to a temporary file, fsynced and renamed; only then does the database row
point at it. A crash at any moment leaves the previous version in force (at worst an orphan file).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from labeldp.common.files import write_parquet_atomic

LABEL_SCHEMA = pa.schema(
    [
        ("example_id", pa.string()),
        ("label", pa.float64()),
        ("user_id", pa.string()),
        ("example_key", pa.int64()),
    ]
)
UNIVERSE_SCHEMA = pa.schema([("example_id", pa.string()), ("example_key", pa.int64())])


class DatasetFiles:
    def __init__(self, data_dir: Path, dataset_id: str) -> None:
        self.root = data_dir / "datasets" / dataset_id

    def labels_path(self, version: int) -> Path:
        return self.root / f"labels-v{version}.parquet"

    def universe_path(self, version: int) -> Path:
        return self.root / f"universe-v{version}.parquet"

    def read_labels(self, version: int) -> pa.Table:
        if version == 0:
            return LABEL_SCHEMA.empty_table()
        return pq.read_table(self.labels_path(version))

    def read_universe(self, version: int) -> pa.Table | None:
        return None if version == 0 else pq.read_table(self.universe_path(version))

    def covered_keys(self, labels_version: int, universe_version: int) -> pa.Array:
        """Ledger keys of the examples a release covers: the universe if declared, else the labels."""
        universe = self.read_universe(universe_version)
        table = universe if universe is not None else self.read_labels(labels_version)
        return table.column("example_key").combine_chunks()

    def write(self, path: Path, table: pa.Table) -> None:
        write_parquet_atomic(path, table)


def upsert(existing: pa.Table, incoming: pa.Table) -> pa.Table:
    """Rows of ``incoming`` replace rows of ``existing`` with the same example_id."""
    kept = existing.filter(
        pc.invert(pc.is_in(existing.column("example_id"), value_set=incoming.column("example_id")))
    )
    return pa.concat_tables([kept.cast(LABEL_SCHEMA), incoming.cast(LABEL_SCHEMA)])
