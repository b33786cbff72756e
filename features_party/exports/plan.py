"""An export's row groups, planned from a Parquet file's footer before any data is read.

The export of a file (a feature table, or a received release alone) is cut into row groups of at most
``rows_per_group(columns)`` rows, each inside one of the file's own row groups: row group ``i`` of the
export is always the same rows of the file, whatever else happens, so a client that received ``i``
groups resumes with ``row_group_offset=i``. A training set keeps, of each planned group, the rows whose
example has a released label — a group can be empty, and is sent empty, so that the numbering holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

MAX_GROUP_ROWS = 131_072
CELLS_PER_GROUP = 1 << 22  # a group of 20 columns is 131,072 rows; one of 4,096 columns, 1,024
MIN_GROUP_ROWS = 1_024


def rows_per_group(columns: int) -> int:
    """Rows in each exported group: fewer for wide tables, so one group's memory stays bounded."""
    return max(MIN_GROUP_ROWS, min(MAX_GROUP_ROWS, CELLS_PER_GROUP // max(columns, 1)))


@dataclass(frozen=True)
class Piece:
    """One exported row group: ``rows`` rows of the file's row group ``row_group`` from ``start``;
    ``first_row`` is its first row's position in the whole file."""

    row_group: int
    start: int
    rows: int
    first_row: int


def plan(file: pq.ParquetFile, group_rows: int) -> list[Piece]:
    pieces, first = [], 0
    for g in range(file.num_row_groups):
        n = file.metadata.row_group(g).num_rows
        for start in range(0, n, group_rows):
            pieces.append(Piece(g, start, min(group_rows, n - start), first + start))
        first += n
    return pieces


def batches(
    file: pq.ParquetFile, pieces: list[Piece], group_rows: int, columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """The pieces' rows, one record batch per piece, read a batch at a time from each of the file's row
    groups (pieces must be consecutive, as ``plan`` made them)."""
    reader: Iterator[pa.RecordBatch] | None = None
    at: tuple[int, int] | None = None  # (row group, start) the reader is at
    for piece in pieces:
        if at != (piece.row_group, piece.start):
            reader = file.iter_batches(batch_size=group_rows, row_groups=[piece.row_group], columns=columns)
            for _ in range(piece.start // group_rows):  # a resume inside a row group: skip its first groups
                next(reader)
        assert reader is not None
        batch = next(reader)
        if batch.num_rows != piece.rows:
            raise RuntimeError(f"read {batch.num_rows} rows for a planned group of {piece.rows} (a bug)")
        at = (piece.row_group, piece.start + piece.rows)
        yield batch
