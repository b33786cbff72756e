"""The two formats an export streams in, a row group at a time: Parquet (the default) and the Arrow IPC
stream. Each yields the bytes written so far after every group, so the server never holds more than
one group's encoding; the Parquet footer (which names every group) comes last."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

PARQUET, ARROW = "parquet", "arrow"
MEDIA_TYPES = {PARQUET: "application/vnd.apache.parquet", ARROW: "application/vnd.apache.arrow.stream"}
SUFFIXES = {PARQUET: ".parquet", ARROW: ".arrows"}


class _Sink:
    """A write-only file object that hands over what was written since it was last asked."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._position = 0

    def write(self, data: bytes | memoryview) -> int:
        self._parts.append(bytes(data))
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        out, self._parts = b"".join(self._parts), []
        return out


def encode(fmt: str, schema: pa.Schema, tables: Iterable[pa.Table]) -> Iterator[bytes]:
    """The export's bytes: the header first, then each table as one row group (one record batch)."""
    sink = _Sink()
    if fmt == PARQUET:
        writer: pq.ParquetWriter | pa.RecordBatchStreamWriter = pq.ParquetWriter(sink, schema)
    else:
        writer = pa.ipc.new_stream(sink, schema)
    try:
        if (
            header := sink.take()
        ):  # Parquet's magic bytes; an IPC stream writes its schema with the first batch
            yield header
        for table in tables:
            if fmt == PARQUET:
                assert isinstance(writer, pq.ParquetWriter)
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
            else:
                writer.write_batch(
                    table.combine_chunks().to_batches()[0] if table.num_rows else _empty(schema)
                )
            yield sink.take()
    finally:
        writer.close()
    yield sink.take()


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
