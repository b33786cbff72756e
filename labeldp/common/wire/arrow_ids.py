"""A chunk's example IDs, read from hostile bytes: a zstd-compressed Arrow IPC stream of one utf8 column,
parsed here — its FlatBuffers metadata bounds-checked field by field — rather than by Arrow's IPC
reader, which is not hardened against such input (a signed, malformed schema message crashed it).
The buffers are decompressed only once the sizes they state are within ``id_bytes_bound`` of the
examples the chunk announces, and the array is validated in full before anything reads it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Protocol

import pyarrow as pa

from labeldp.common.inputs import MAX_EXAMPLE_ID_BYTES
from labeldp.common.wire.format import CHUNK_MAX_ID_BYTES, WireError

_BUFFER_SLACK = 64  # per Arrow buffer: alignment padding


class IdChunk(Protocol):
    """A chunk that carries example IDs: a release's ``Chunk`` or a pricing request's ``PricingChunk``."""

    @property
    def index(self) -> int: ...

    @property
    def examples(self) -> int: ...

    @property
    def example_ids(self) -> bytes: ...


def id_bytes_bound(examples: int) -> int:
    """The most an honest chunk's example IDs decompress to: the IDs (at most ``CHUNK_MAX_ID_BYTES``,
    and at most ``MAX_EXAMPLE_ID_BYTES`` each), their offsets, the validity bitmap and padding. A chunk
    of 262,144 examples: about 3 MiB."""
    data = min(CHUNK_MAX_ID_BYTES, examples * MAX_EXAMPLE_ID_BYTES)
    return data + 4 * (examples + 1) + math.ceil(examples / 8) + 3 * _BUFFER_SLACK


def _unpack(buf: bytes, fmt: str, at: int, what: str) -> tuple[int, ...]:
    if not 0 <= at <= len(buf) - struct.calcsize(fmt):
        raise WireError("invalid_argument", f"{what} has malformed example IDs (IPC metadata)")
    return struct.unpack_from(fmt, buf, at)


class _Flat:
    """Just enough of a FlatBuffers reader for an Arrow IPC message's metadata (format/Message.fbs,
    Schema.fbs): a table's scalars, strings, sub-tables and vectors, every offset bounds-checked. The
    bytes are hostile until decoded, and Arrow's own IPC reader is not hardened against them (a
    signed, malformed schema message crashed it), so they never reach it."""

    def __init__(self, buf: bytes, at: int, what: str) -> None:
        self.buf, self.at, self.what = buf, at, what
        self.vtable = at - _unpack(buf, "<i", at, what)[0]
        self.vtable_size = _unpack(buf, "<H", self.vtable, what)[0]

    @classmethod
    def root(cls, buf: bytes, what: str) -> _Flat:
        return cls(buf, _unpack(buf, "<I", 0, what)[0], what)

    def _field(self, index: int) -> int | None:
        slot = 4 + 2 * index
        if slot + 2 > self.vtable_size:
            return None
        offset = _unpack(self.buf, "<H", self.vtable + slot, self.what)[0]
        return self.at + offset if offset else None

    def _target(self, at: int) -> int:
        return at + _unpack(self.buf, "<I", at, self.what)[0]

    def has(self, index: int) -> bool:
        return self._field(index) is not None

    def scalar(self, index: int, fmt: str, default: int = 0) -> int:
        at = self._field(index)
        return default if at is None else _unpack(self.buf, fmt, at, self.what)[0]

    def table(self, index: int) -> _Flat | None:
        at = self._field(index)
        return None if at is None else _Flat(self.buf, self._target(at), self.what)

    def _vector(self, index: int) -> tuple[int, int]:
        at = self._field(index)
        if at is None:
            return 0, 0
        start = self._target(at)
        return start + 4, _unpack(self.buf, "<I", start, self.what)[0]

    def text(self, index: int) -> bytes:
        start, count = self._vector(index)
        _unpack(self.buf, f"<{count}s", start, self.what)
        return self.buf[start : start + count]

    def structs(self, index: int, fmt: str) -> list[tuple[int, ...]]:
        start, count = self._vector(index)
        size = struct.calcsize(fmt)
        return [_unpack(self.buf, fmt, start + i * size, self.what) for i in range(count)]

    def tables(self, index: int) -> list[_Flat]:
        start, count = self._vector(index)
        return [_Flat(self.buf, self._target(start + 4 * i), self.what) for i in range(count)]


# Message.fbs / Schema.fbs: the MessageHeader union (Schema 1, RecordBatch 3), the Type union's Utf8,
# the compression codecs
_SCHEMA, _RECORD_BATCH, _UTF8, _ZSTD = 1, 3, 5, 1
_UNCOMPRESSED = -1  # a compressed buffer's length prefix: stored as is
_CONTINUATION = 0xFFFFFFFF


def _messages(data: bytes, what: str) -> Iterator[tuple[_Flat, bytes]]:
    """The IPC stream's messages as (metadata, body): each an optional continuation marker, the
    metadata's length and bytes, then the body its metadata states; a zero length ends the stream."""
    pos = 0
    while pos < len(data):
        length = _unpack(data, "<I", pos, what)[0]
        pos += 4
        if length == _CONTINUATION:
            length = _unpack(data, "<I", pos, what)[0]
            pos += 4
        if length == 0:
            return
        if pos + length > len(data):
            raise WireError("invalid_argument", f"{what} has malformed example IDs (a cut message)")
        meta = _Flat.root(data[pos : pos + length], what)
        pos += length
        body_length = meta.scalar(3, "<q")
        if not 0 <= body_length <= len(data) - pos:
            raise WireError("invalid_argument", f"{what} has malformed example IDs (a cut body)")
        yield meta, data[pos : pos + body_length]
        pos += body_length


def _check_schema(meta: _Flat, what: str) -> None:
    """One field, ``example_id``, utf8, not dictionary-encoded, no children, little-endian."""
    schema = meta.table(2) if meta.scalar(1, "<B") == _SCHEMA else None
    fields = schema.tables(1) if schema is not None and schema.scalar(0, "<h") == 0 else []
    field = fields[0] if len(fields) == 1 else None
    if (
        field is None
        or field.text(0) != b"example_id"
        or field.scalar(2, "<B") != _UTF8
        or field.has(4)
        or field.tables(5)
    ):
        raise WireError("invalid_argument", f"{what} does not hold one utf8 example_id column")


def _batch_layout(meta: _Flat, body: bytes, what: str) -> tuple[int, int, list[tuple[int, ...]], bool]:
    """A record batch message's (rows, nulls, buffers as (offset, length) in the body, compressed):
    one utf8 column, so one node and three buffers (validity, offsets, data), zstd or uncompressed."""
    batch = meta.table(2) if meta.scalar(1, "<B") == _RECORD_BATCH else None
    if batch is None:
        raise WireError("invalid_argument", f"{what} holds an IPC message that is not a record batch")
    rows, nodes, buffers = batch.scalar(0, "<q"), batch.structs(1, "<qq"), batch.structs(2, "<qq")
    if len(nodes) != 1 or len(buffers) != 3 or batch.structs(4, "<q"):
        raise WireError("invalid_argument", f"{what} does not hold one utf8 example_id column")
    length, nulls = nodes[0]
    if rows < 0 or length != rows or not 0 <= nulls <= rows:
        raise WireError("invalid_argument", f"{what} has malformed example IDs (lengths)")
    for offset, size in buffers:
        if offset < 0 or size < 0 or offset + size > len(body):
            raise WireError("invalid_argument", f"{what} has a buffer outside its message body")
    compression = batch.table(3)
    if compression is not None and (compression.scalar(0, "<b") != _ZSTD or compression.scalar(1, "<b")):
        raise WireError("invalid_argument", f"{what}'s example IDs must be zstd-compressed (or not at all)")
    return rows, nulls, buffers, compression is not None


def _stated(body: bytes, offset: int, size: int, compressed: bool, what: str) -> int:
    """What one buffer decompresses to, by its length prefix (a compressed buffer's first 8 bytes)."""
    if not compressed or size == 0:
        return size
    if size < 8:
        raise WireError("invalid_argument", f"{what} has a compressed buffer without its length")
    stated = int.from_bytes(body[offset : offset + 8], "little", signed=True)
    if stated < _UNCOMPRESSED:
        raise WireError("invalid_argument", f"{what} states a negative buffer length")
    return size - 8 if stated == _UNCOMPRESSED else stated


def _buffer(body: bytes, offset: int, size: int, compressed: bool, what: str) -> pa.Buffer | None:
    if size == 0:
        return None
    raw = body[offset : offset + size]
    if not compressed:
        return pa.py_buffer(raw)
    stated = int.from_bytes(raw[:8], "little", signed=True)
    if stated == _UNCOMPRESSED:
        return pa.py_buffer(raw[8:])
    try:
        out = pa.Codec("zstd").decompress(raw[8:], decompressed_size=stated)
    except (OSError, pa.ArrowException) as exc:  # a frame that does not decompress to what it states
        raise WireError("invalid_argument", f"{what} has unreadable example IDs") from exc
    if out.size != stated:
        raise WireError("invalid_argument", f"{what} has unreadable example IDs")
    return out


def read_ids(chunk: IdChunk) -> pa.Array:
    """The chunk's example IDs — an Arrow IPC stream of one utf8 column — read by this module, not by
    Arrow's IPC reader: the layout checked, and the buffers decompressed only once the sizes they
    state are within ``id_bytes_bound`` of the examples the chunk announces (RESOURCE_EXHAUSTED
    otherwise); the array is then validated in full (offsets, UTF-8) before anything reads it."""
    what, data = f"chunk {chunk.index}", chunk.example_ids
    limit, rows, stated, arrays = id_bytes_bound(chunk.examples), 0, 0, []
    messages = _messages(data, what)
    first = next(messages, None)
    if first is None:
        raise WireError("invalid_argument", f"{what} has no example IDs")
    _check_schema(first[0], what)
    for meta, body in messages:
        n, nulls, buffers, compressed = _batch_layout(meta, body, what)
        rows += n
        stated += sum(_stated(body, offset, size, compressed, what) for offset, size in buffers)
        if rows > chunk.examples:
            raise WireError("invalid_argument", f"{what} holds more example IDs than examples")
        if stated > limit:
            raise WireError(
                "resource_exhausted",
                f"{what}'s example IDs would decompress to {stated} bytes; {chunk.examples} examples "
                f"take at most {limit}",
            )
        validity, offsets, values = (_buffer(body, o, s, compressed, what) for o, s in buffers)
        if offsets is None or (nulls and validity is None):
            raise WireError("invalid_argument", f"{what} has malformed example IDs (buffers)")
        try:
            array = pa.StringArray.from_buffers(n, offsets, values or pa.py_buffer(b""), validity, nulls)
            array.validate()
            array.validate(full=True)  # offsets within the data, and UTF-8, before anything reads them
        except (pa.ArrowException, ValueError) as exc:
            if "utf" in str(exc).lower():
                raise WireError(
                    "invalid_argument", f"{what}: column 'example_id' holds text that is not valid UTF-8"
                ) from exc
            raise WireError("invalid_argument", f"{what} has unreadable example IDs") from exc
        arrays.append(array)
    if not arrays:
        raise WireError("invalid_argument", f"{what} has no example IDs")
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
