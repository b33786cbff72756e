"""The ``example_id`` column of any upload (labels, universes, feature tables): present, non-empty,
unique. One implementation for both parties; failures name the first offending data rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from labeldp.common.errors import DomainError

MAX_REPORTED_ROWS = 10


def first_rows(mask: np.ndarray) -> list[int]:
    """1-based data row numbers (header excluded) of the first offending rows."""
    return [int(i) + 1 for i in np.flatnonzero(mask)[:MAX_REPORTED_ROWS]]


def example_ids(table: pa.Table) -> pa.Array:
    if "example_id" not in table.column_names:
        raise DomainError(
            "missing-column", "the upload needs an example_id column", rows=[], columns=["example_id"]
        )
    ids = pc.cast(table.column("example_id").combine_chunks(), pa.string())
    empty = pc.or_kleene(pc.is_null(ids), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(ids)), 0))
    empty_np = np.asarray(pc.fill_null(empty, True).to_numpy(zero_copy_only=False), dtype=bool)
    if empty_np.any():
        raise DomainError(
            "missing-example-id",
            "example_id must not be empty",
            rows=first_rows(empty_np),
            columns=["example_id"],
        )
    counts = pa.table({"example_id": ids}).group_by("example_id").aggregate([("example_id", "count")])
    duplicated = counts.filter(pc.greater(counts.column("example_id_count"), 1)).column("example_id")
    if len(duplicated):
        mask = np.asarray(pc.is_in(ids, value_set=duplicated).to_numpy(zero_copy_only=False), dtype=bool)
        raise DomainError(
            "duplicate-example-id",
            f"{len(duplicated)} example IDs appear more than once",
            rows=first_rows(mask),
            columns=["example_id"],
        )
    return ids
