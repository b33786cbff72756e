"""The two formats an export streams in, a row group at a time: Parquet (the default) and the Arrow IPC
stream. Each yields the bytes written so far after every group, so the server never holds more than
one group's encoding; the Parquet footer (which names every group) comes last. The bytes go out in
blocks of about ``BLOCK_BYTES``, not as one block per group: a group's 20-odd MB joined into one
``bytes``, then copied again by the HTTP layer and the socket's buffer, would cost several times
its size, in blocks the C allocator keeps once freed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

PARQUET, ARROW = "parquet", "arrow"
MEDIA_TYPES = {PARQUET: "application/vnd.apache.parquet", ARROW: "application/vnd.apache.arrow.stream"}
SUFFIXES = {PARQUET: ".parquet", ARROW: ".arrows"}
BLOCK_BYTES = 1 << 20


class _Sink:
    """A write-only file object that hands over what was written since it was last asked, in blocks
    of about ``BLOCK_BYTES`` (the writers write a page or less at a time)."""

    closed = False

    def __init__(self) -> None:
        self._blocks: list[bytes] = []
        self._parts: list[bytes] = []
        self._pending = 0
        self._position = 0

    def write(self, data: bytes | memoryview) -> int:
        self._parts.append(bytes(data))
        self._pending += len(data)
        self._position += len(data)
        if self._pending >= BLOCK_BYTES:
            self._seal()
        return len(data)

    def _seal(self) -> None:
        if self._parts:
            self._blocks.append(b"".join(self._parts))
            self._parts, self._pending = [], 0

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> list[bytes]:
        self._seal()
        out, self._blocks = self._blocks, []
        return out


def encode(fmt: str, schema: pa.Schema, tables: Iterable[pa.Table]) -> Iterator[bytes]:
    """The export's bytes: the header first, then each table as one row group (one record batch)."""
    sink = _Sink()
    if fmt == PARQUET:
        writer: pq.ParquetWriter | pa.RecordBatchStreamWriter = pq.ParquetWriter(sink, schema)
    else:
        writer = pa.ipc.new_stream(sink, schema)
    try:
        yield from sink.take()  # Parquet's magic bytes; an IPC stream writes its schema with the first batch
        for table in tables:
            if fmt == PARQUET:
                assert isinstance(writer, pq.ParquetWriter)
                writer.write_table(table, row_group_size=max(table.num_rows, 1))
            else:
                writer.write_batch(
                    table.combine_chunks().to_batches()[0] if table.num_rows else _empty(schema)
                )
            yield from sink.take()
    finally:
        writer.close()
    yield from sink.take()


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)
