"""Atomic file writes: write to a temporary name, fsync, rename, fsync the directory."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.instance import temporary_name


def fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """``path`` holds either nothing (or the old bytes) or all of ``data``, whatever crashes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name))
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)


def create_once(path: Path, data: bytes, mode: int = 0o600) -> bool:
    """Create ``path`` holding all of ``data`` unless it exists; False if it did. Safe when several
    processes race to create the same file (workers starting together): the complete file is linked
    into place, which fails if another got there first, so all of them end up reading one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return True


def write_parquet_atomic(path: Path, table: pa.Table) -> None:
    """After a crash at any point, ``path`` holds either the old file or the complete new one."""
    write_tables_atomic(path, table.schema, [table])


def write_tables_atomic(path: Path, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
    """``write_parquet_atomic`` for tables that arrive one at a time (one or more row groups each),
    so a file larger than memory can be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name))
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for table in tables:
                writer.write_table(table)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)


STREAM_READ_BUFFER = 1 << 18


def open_parquet_for_batches(path: Path) -> pq.ParquetFile:
    """A Parquet file opened to be read a batch at a time in bounded memory. Arrow's default
    pre-buffers a whole row group's column chunks before the first batch (170 MB for a 1M-row group
    of 20 float columns); without it each column reads its chunk through a small buffer instead."""
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=STREAM_READ_BUFFER)


def parquet_batches(
    file: pq.ParquetFile, batch_rows: int, columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file, one row group at a time. (A single ``iter_batches`` over a
    file with many row groups keeps memory in proportion to the whole file; per row group it stays
    in proportion to a batch.)"""
    for group in range(file.num_row_groups):
        yield from file.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns)
        release_arrow_memory()


def release_arrow_memory() -> None:
    """Hand freed batch buffers back to the OS: Arrow's allocator otherwise keeps them, and a
    10M-row upload would hold gigabytes it no longer uses."""
    pa.default_memory_pool().release_unused()
