"""The receiver's side: the signature checked against the pinned key(s) of the claimed sender *before*
any chunk is read, then the recipient, the expiry, the counts and the published mechanism; then the
chunks streamed through the same hash, and nothing decoded until the hash matches.

A pinned sender may still be hostile, so what the signature covers is bounded before it costs
anything: the mechanism's sizes before its bins are derived, the announced counts against the size
limit, and each chunk's example IDs — a zstd-compressed Arrow IPC stream, read here rather than by
Arrow's IPC reader — by the sizes its buffers state *before* they are decompressed
(``id_bytes_bound``); the decoded IDs are validated in full and then follow the upload rules
(``labeldp.common.example_ids``). Duplicates across a whole message are the receiver's to find
(``features_party/receiver/unique_ids.py``).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import as_text, check_ids
from labeldp.common.inputs import MAX_EXAMPLE_ID_BYTES, is_clean_text, is_uuid
from labeldp.common.model_message import KeyLookup, as_pins, verified_owners
from labeldp.common.wire.format import (
    CHUNK_MAX_EXAMPLES,
    CHUNK_MAX_ID_BYTES,
    FORMAT_VERSION,
    WireError,
)
from labeldp.common.wire.mechanism import mechanism_from_header
from labeldp.common.wire.sender import encoding_for
from labeldp.mechanisms.published import MAX_BINS, PublishedMechanism
from labeldp.mechanisms.support import MAX_SUPPORT_SIZE
from labeldp.v1 import delivery_pb2 as pb

__all__ = [
    "ChunkStream",
    "KeyLookup",
    "VerifiedHeader",
    "check_fits",
    "check_header",
    "decode_chunk",
    "id_bytes_bound",
]

# A header without ``support_bins`` (a sender from before it existed) has the receiver derive them,
# comparing every support point with every bin: at most this many pairs (about 0.3 s).
OLD_SENDER_MAX_PAIRS = 10_000_000
_BUFFER_SLACK = 64  # per Arrow buffer: alignment padding


@dataclass(frozen=True)
class VerifiedHeader:
    header: pb.ReleaseHeader
    mechanism: PublishedMechanism
    owners: tuple[str | None, ...] = (None,)  # of the pins the signature verified under


def check_header(
    frame: pb.ReleaseFrame, trusted: KeyLookup, receiver_id: str, now_unix_ms: int
) -> VerifiedHeader:
    """Authenticate the header frame and validate what it states; raises ``WireError`` with the
    status to answer."""
    if frame.WhichOneof("frame") != "header":
        raise WireError("invalid_argument", "the first frame must be the signed header")
    signed = frame.header
    header = pb.ReleaseHeader()
    try:
        header.ParseFromString(signed.header)
    except Exception as exc:  # protobuf raises DecodeError subclasses of Exception
        raise WireError("unauthenticated", "the header is not a valid ReleaseHeader") from exc
    if not (is_clean_text(header.sender_id) and is_clean_text(header.sender_key_id, 80)):
        raise WireError("unauthenticated", "the header names no valid sender")
    if not is_uuid(header.release_id):
        raise WireError("invalid_argument", "release_id must be a UUID (lowercase, 8-4-4-4-12)")
    found = trusted(header.sender_id, header.sender_key_id)
    if not as_pins(found):
        raise WireError(
            "unauthenticated", f"sender {header.sender_id!r} with key {header.sender_key_id!r} is not pinned"
        )
    owners = verified_owners(found, signed.signature, signed.header)
    if not owners:
        raise WireError("unauthenticated", "the header's signature does not verify")
    # From here on every header field is authentic (but a pinned sender can still be wrong or hostile).
    if header.format_version != FORMAT_VERSION:
        raise WireError("failed_precondition", f"unsupported format version {header.format_version}")
    if header.recipient_id != receiver_id:
        raise WireError("permission_denied", f"this release is addressed to {header.recipient_id!r}")
    if header.expires_at_unix_ms <= now_unix_ms:
        raise WireError("failed_precondition", "the release has expired")
    _check_counts(header)
    _check_mechanism_sizes(header)
    mechanism = mechanism_from_header(header)
    if header.bin_encoding != encoding_for(mechanism.bin_codes):
        raise WireError("invalid_argument", "the bin encoding does not match the number of bin codes")
    return VerifiedHeader(header, mechanism, tuple(owners))


def _check_counts(header: pb.ReleaseHeader) -> None:
    """Chunks as an honest sender cuts them: none empty, none over ``CHUNK_MAX_EXAMPLES``."""
    examples, chunks = header.example_count, header.chunk_count
    if chunks > examples or examples > chunks * CHUNK_MAX_EXAMPLES:
        raise WireError(
            "invalid_argument",
            f"{examples} examples cannot travel in {chunks} chunks of 1 to {CHUNK_MAX_EXAMPLES} examples",
        )


def _check_mechanism_sizes(header: pb.ReleaseHeader) -> None:
    """Bound the published mechanism's sizes before anything is derived from them: the support within
    ``MAX_SUPPORT_SIZE``, the bins within ``MAX_BINS``, and for a sender that predates ``support_bins``
    the support × bins comparisons deriving them would take within ``OLD_SENDER_MAX_PAIRS``."""
    m, prior = header.mechanism, header.prior
    support = len(prior.support)
    if support > MAX_SUPPORT_SIZE or len(prior.masses) > MAX_SUPPORT_SIZE:
        raise WireError("invalid_argument", f"the support has more than {MAX_SUPPORT_SIZE} points")
    if max(len(m.bin_values), len(m.bin_lower), len(m.bin_upper)) > MAX_BINS:
        raise WireError("invalid_argument", f"the mechanism has more than {MAX_BINS} bins")
    if len(m.support_bins) > MAX_SUPPORT_SIZE:
        raise WireError("invalid_argument", f"support_bins has more than {MAX_SUPPORT_SIZE} entries")
    if not len(m.support_bins) and m.kind != "rr_top_k":  # RR-Top-k's classes map in linear time
        bins = min(len(m.bin_lower), len(m.bin_upper))
        if support * bins > OLD_SENDER_MAX_PAIRS:
            raise WireError(
                "invalid_argument",
                f"without support_bins a message may state at most {OLD_SENDER_MAX_PAIRS} support points "
                f"× bins (this one: {support} × {bins}); send support_bins",
            )


def check_fits(header: pb.ReleaseHeader, max_bytes: int) -> None:
    """Every example costs at least one byte of bin codes on the wire: a header announcing more
    examples than ``max_bytes`` is refused before any chunk is read (RESOURCE_EXHAUSTED)."""
    if header.example_count > max_bytes:
        raise WireError(
            "resource_exhausted", f"{header.example_count} examples cannot fit the limit of {max_bytes} bytes"
        )


@dataclass
class ChunkStream:
    """Feeds chunk frames through the header's digest, in order, within a size limit."""

    header: pb.ReleaseHeader
    max_bytes: int
    received: int = 0
    bytes_seen: int = 0
    examples: int = 0
    _digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def add(self, frame: pb.ReleaseFrame) -> bytes:
        """Account for one chunk frame; returns its serialized bytes (to be spooled, not decoded)."""
        if frame.WhichOneof("frame") != "chunk":
            raise WireError("invalid_argument", "only the first frame may be a header")
        chunk = frame.chunk
        if chunk.index != self.received:
            raise WireError(
                "invalid_argument", f"chunk {chunk.index} arrived where chunk {self.received} was due"
            )
        if self.received >= self.header.chunk_count:
            raise WireError("invalid_argument", "more chunks than the header announces")
        if not 0 < chunk.examples <= CHUNK_MAX_EXAMPLES:
            raise WireError(
                "invalid_argument", f"chunk {chunk.index} must hold 1 to {CHUNK_MAX_EXAMPLES} examples"
            )
        data = chunk.SerializeToString(deterministic=True)
        self.bytes_seen += len(data)
        if self.bytes_seen > self.max_bytes:
            raise WireError("resource_exhausted", f"the release exceeds the limit of {self.max_bytes} bytes")
        self._digest.update(data)
        self.received += 1
        self.examples += chunk.examples
        return data

    def finish(self) -> bytes:
        """Check completeness and the digest; returns the digest."""
        if self.received != self.header.chunk_count:
            raise WireError(
                "invalid_argument", f"stream ended after {self.received} of {self.header.chunk_count} chunks"
            )
        digest = self._digest.digest()
        if digest != self.header.payload_sha256:
            raise WireError("invalid_argument", "the chunks do not match the signed digest")
        if self.examples != self.header.example_count:
            raise WireError("invalid_argument", "the example count does not match the header")
        return digest


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


def _read_ids(chunk: pb.Chunk) -> pa.Array:
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


def decode_chunk(
    data: bytes, header: pb.ReleaseHeader, offset: int = 0
) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """Decode one verified chunk into its example IDs and bin indices, checking their shapes and the
    IDs by the upload rules (UTF-8 text, present, at most 256 bytes, no control characters);
    ``offset`` is how many examples earlier chunks held (errors name the example's position)."""
    chunk = pb.Chunk()
    chunk.ParseFromString(data)
    if not 0 < chunk.examples <= CHUNK_MAX_EXAMPLES:
        raise WireError(
            "invalid_argument", f"chunk {chunk.index} must hold 1 to {CHUNK_MAX_EXAMPLES} examples"
        )
    ids = _read_ids(chunk)
    if len(ids) != chunk.examples:
        raise WireError("invalid_argument", f"chunk {chunk.index} is malformed")
    try:
        ids = as_text(ids, "example_id")
        check_ids(ids, offset)
    except DomainError as exc:
        rows = exc.extra.get("rows") or []
        where = f" (example {rows[0]} of the message)" if rows else ""
        raise WireError("invalid_argument", f"chunk {chunk.index}: {exc.detail}{where}") from exc
    width = 1 if header.bin_encoding == pb.BIN_ENCODING_UINT8 else 2
    dtype = np.uint8 if width == 1 else np.dtype("<u2")
    if len(chunk.bins) % width:
        raise WireError("invalid_argument", f"chunk {chunk.index} is malformed")
    bins = np.frombuffer(chunk.bins, dtype=dtype).astype(np.int64)
    if len(ids) != chunk.examples or bins.size != chunk.examples:
        raise WireError("invalid_argument", f"chunk {chunk.index} is malformed")
    codes = len(header.mechanism.bin_values) + (1 if header.mechanism.privacy_unit == "user" else 0)
    if bins.size and int(bins.max()) >= codes:
        raise WireError("invalid_argument", f"chunk {chunk.index} has a bin index out of range")
    return ids, bins
