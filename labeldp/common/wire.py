"""The one signed message a release travels as (``labeldp.v1``): building it, checking it, and the
one mapping between ``PublishedMechanism`` and its protobuf form.

The sender serializes the release into chunks, hashes the serialized chunks in order, puts the hash
into the header and signs the header's exact bytes. The receiver checks the signature against the
pinned key of the claimed sender *before* reading any chunk, then the recipient, the expiry and the
published mechanism, then streams the chunks through the same hash; nothing is decoded until the hash
matches.

Chunks carry the example IDs as a zstd-compressed Arrow string column (so framing costs almost
nothing on the wire) and the bin codes packed as uint8 (at most 256 codes) or little-endian uint16:
``0..m-1`` are the mechanism's bins, and a user-level release adds the code ``m`` for examples over
the contribution bound (listed, but carrying no label information). Both parties
keep frames on disk in one format: length-prefixed records (``write_records`` / ``read_records``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from labeldp.common.errors import DomainError
from labeldp.common.identity import Identity, verify
from labeldp.common.inputs import is_clean_text, is_uuid
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.v1 import delivery_pb2 as pb

FORMAT_VERSION = 1
CHUNK_MAX_EXAMPLES = 262_144
CHUNK_MAX_ID_BYTES = 2 * 2**20  # keeps every frame well under the 8 MiB message limit below
MAX_MESSAGE_BYTES = 8 * 2**20
_ID_SCHEMA = pa.schema([("example_id", pa.string())])
_LEN = struct.Struct("<I")

_HTTP_FOR_GRPC = {
    "unauthenticated": 401,
    "permission_denied": 403,
    "failed_precondition": 412,
    "resource_exhausted": 413,
    "already_exists": 409,
    "invalid_argument": 400,
}


class WireError(DomainError):
    """A refused message; ``code`` is the gRPC status the receiver answers with, in snake case."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message, status=_HTTP_FOR_GRPC.get(code, 400), grpc_code=code.upper())


# -- the published mechanism on the wire -----------------------------------------------------------
@dataclass(frozen=True)
class MechanismFields:
    """The header fields a ``PublishedMechanism`` occupies."""

    mechanism: pb.Mechanism
    prior: pb.NoisyPrior
    epsilon_total: float
    epsilon_prior: float
    epsilon_randomize: float


def mechanism_to_proto(published: PublishedMechanism) -> MechanismFields:
    edges = published.bin_edges
    return MechanismFields(
        mechanism=pb.Mechanism(
            kind=published.kind,
            epsilon=published.epsilon_randomize,
            implemented_epsilon=published.implemented_epsilon,
            bin_values=published.bin_values,
            loss=published.loss,
            bin_lower=[lo for lo, _ in edges],
            bin_upper=[hi for _, hi in edges],
            support_bins=published.support_bins,
            privacy_unit=published.privacy_unit,
            contribution_bound=published.contribution_bound or 0,
            prior_contribution_bound=published.prior_contribution_bound or 0,
            epsilon_bound=published.epsilon_bound,
            epsilon_example=published.epsilon_example or 0.0,
        ),
        prior=pb.NoisyPrior(support=published.support, masses=published.prior),
        epsilon_total=published.epsilon,
        epsilon_prior=published.epsilon_prior,
        epsilon_randomize=published.epsilon_randomize,
    )


def _support_bins_of_old_sender(header: pb.ReleaseHeader) -> list[int]:
    """Messages from senders before ``support_bins`` existed: derive the map from the bin intervals
    (RR-on-Bins) or from the reported classes (RR-Top-k)."""
    m, support = header.mechanism, list(header.prior.support)
    if m.kind == "rr_top_k":
        position = {value: j for j, value in enumerate(m.bin_values)}
        return [position.get(value, -1) for value in support]
    out = []
    for value in support:
        found = [
            j for j, (lo, hi) in enumerate(zip(m.bin_lower, m.bin_upper, strict=False)) if lo <= value <= hi
        ]
        out.append(found[0] if found else -2)  # -2 fails validation: a support point in no bin
    return out


def mechanism_from_header(header: pb.ReleaseHeader) -> PublishedMechanism:
    """The published mechanism a (verified) header states; a malformed one is ``invalid_argument``."""
    m = header.mechanism
    if m.epsilon != header.epsilon_randomize:
        raise WireError(
            "invalid_argument", "the mechanism's epsilon differs from the header's epsilon_randomize"
        )
    bins = list(m.support_bins) if len(m.support_bins) else _support_bins_of_old_sender(header)
    try:
        return PublishedMechanism(
            kind=m.kind,
            loss=m.loss or "squared",
            epsilon=header.epsilon_total,
            epsilon_prior=header.epsilon_prior,
            epsilon_randomize=header.epsilon_randomize,
            implemented_epsilon=m.implemented_epsilon,
            support=tuple(header.prior.support),
            prior=tuple(header.prior.masses),
            support_bins=tuple(bins),
            bin_values=tuple(m.bin_values),
            privacy_unit=m.privacy_unit or "example",
            contribution_bound=m.contribution_bound or None,
            prior_contribution_bound=m.prior_contribution_bound or None,
            epsilon_bound=m.epsilon_bound,
            epsilon_example=m.epsilon_example or None,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise WireError(
            "invalid_argument", f"malformed mechanism: {where} {first.get('msg', '')}".strip()
        ) from exc


# -- sender side ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MessageHeader:
    """What the labels party states about a release in its message (all of it public)."""

    release_id: str
    sender_id: str
    recipient_id: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    label_type: str
    mechanism: PublishedMechanism


@dataclass(frozen=True)
class ReleaseMessage(MessageHeader):
    """A whole message in memory: the header and the released (example ID, bin) pairs."""

    example_ids: pa.Array
    bins: npt.NDArray[np.integer]


Pieces = Iterable[tuple[pa.Array, npt.NDArray[np.integer]]]  # (example IDs, bins), in message order


def encoding_for(num_bins: int) -> pb.BinEncoding:
    return pb.BIN_ENCODING_UINT8 if num_bins <= 256 else pb.BIN_ENCODING_UINT16_LE


def _pack_bins(bins: npt.NDArray[np.integer], encoding: pb.BinEncoding) -> bytes:
    dtype = np.uint8 if encoding == pb.BIN_ENCODING_UINT8 else np.dtype("<u2")
    arr = np.asarray(bins)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > np.iinfo(dtype).max):
        raise ValueError("bin indices do not fit the bin encoding")  # a bug, never silent wrap-around
    return arr.astype(dtype).tobytes()


def _encode_ids(ids: pa.Array) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, _ID_SCHEMA, options=options) as writer:
        writer.write_batch(pa.record_batch([ids], schema=_ID_SCHEMA))
    return bytes(sink.getvalue().to_pybytes())


def _chunk_bounds(ids: pa.Array) -> Iterator[tuple[int, int]]:
    lengths = np.asarray(pa.compute.binary_length(ids).to_numpy(zero_copy_only=False), dtype=np.int64)
    start, n = 0, len(ids)
    while start < n:
        stop = min(n, start + CHUNK_MAX_EXAMPLES)
        cumulative = np.cumsum(lengths[start:stop])
        fits = int(np.searchsorted(cumulative, CHUNK_MAX_ID_BYTES, side="right"))
        stop = start + max(1, fits)
        yield start, stop
        start = stop


def _chunks(pieces: Pieces, encoding: pb.BinEncoding) -> Iterator[pb.Chunk]:
    """The chunk frames of the pieces, numbered in order (a piece never shares a chunk)."""
    index = 0
    for example_ids, bins in pieces:
        ids = example_ids.cast(pa.string())
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        if len(ids) != len(bins):
            raise ValueError("example_ids and bins must have the same length")
        for start, stop in _chunk_bounds(ids):
            yield pb.Chunk(
                index=index,
                examples=stop - start,
                example_ids=_encode_ids(ids.slice(start, stop - start)),
                bins=_pack_bins(bins[start:stop], encoding),
            )
            index += 1


def _signed_header(
    release: MessageHeader, identity: Identity, examples: int, chunks: int, digest: bytes
) -> pb.ReleaseFrame:
    fields = mechanism_to_proto(release.mechanism)
    header = pb.ReleaseHeader(
        format_version=FORMAT_VERSION,
        release_id=release.release_id,
        sender_id=release.sender_id,
        sender_key_id=identity.key_id,
        recipient_id=release.recipient_id,
        created_at_unix_ms=release.created_at_unix_ms,
        expires_at_unix_ms=release.expires_at_unix_ms,
        label_type=release.label_type,
        epsilon_total=fields.epsilon_total,
        epsilon_prior=fields.epsilon_prior,
        epsilon_randomize=fields.epsilon_randomize,
        mechanism=fields.mechanism,
        prior=fields.prior,
        example_count=examples,
        chunk_count=chunks,
        payload_sha256=digest,
        bin_encoding=encoding_for(release.mechanism.bin_codes),
    )
    header_bytes = header.SerializeToString(deterministic=True)
    return pb.ReleaseFrame(header=pb.SignedHeader(header=header_bytes, signature=identity.sign(header_bytes)))


def build_frames(release: ReleaseMessage, identity: Identity) -> list[pb.ReleaseFrame]:
    """The whole message in memory: the signed header frame, then the chunk frames."""
    encoding = encoding_for(release.mechanism.bin_codes)
    chunks = list(_chunks([(release.example_ids, release.bins)], encoding))
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.SerializeToString(deterministic=True))
    header = _signed_header(release, identity, len(release.example_ids), len(chunks), digest.digest())
    return [header, *(pb.ReleaseFrame(chunk=c) for c in chunks)]


def store_message(path: Path, release: MessageHeader, pieces: Pieces, identity: Identity) -> None:
    """Build a message from ``pieces`` and store it at ``path`` without holding it in memory: the chunk
    frames are spooled (and hashed, in order) one at a time, then the signed header and the spooled
    chunks are written atomically. Chunks never span two pieces; the receiver cannot tell the pieces
    apart."""
    encoding = encoding_for(release.mechanism.bin_codes)
    path.parent.mkdir(parents=True, exist_ok=True)
    spool = path.with_name(f".{path.name}.{uuid.uuid4().hex}.chunks")
    try:
        digest, examples, count = hashlib.sha256(), 0, 0
        with open(spool, "wb") as fh:
            for chunk in _chunks(pieces, encoding):
                digest.update(chunk.SerializeToString(deterministic=True))
                write_records(fh, [pb.ReleaseFrame(chunk=chunk).SerializeToString(deterministic=True)])
                examples, count = examples + chunk.examples, count + 1
        header = _signed_header(release, identity, examples, count, digest.digest())
        _store_records(path, header.SerializeToString(deterministic=True), spool)
    finally:
        spool.unlink(missing_ok=True)


# -- frames on disk ---------------------------------------------------------------------------------
def write_records(fh: BinaryIO, records: Iterable[bytes]) -> None:
    """Append length-prefixed records (the on-disk form of frames and spooled chunks)."""
    for data in records:
        fh.write(_LEN.pack(len(data)))
        fh.write(data)


def read_records(path: Path) -> Iterator[bytes]:
    """The records of a file written by ``write_records``, one at a time (never loaded whole)."""
    with open(path, "rb") as fh:
        while prefix := fh.read(_LEN.size):
            if len(prefix) != _LEN.size:
                raise ValueError(f"{path} ends inside a record length")
            (size,) = _LEN.unpack(prefix)
            data = fh.read(size)
            if len(data) != size:
                raise ValueError(f"{path} ends inside a record")
            yield data


def store_frames(path: Path, frames: Iterable[pb.ReleaseFrame]) -> None:
    """Write a message's frames atomically (temporary file, fsync, rename)."""
    records = (f.SerializeToString(deterministic=True) for f in frames)
    _store_records(path, next(records), None, records)


def _store_records(path: Path, first: bytes, spooled: Path | None, rest: Iterable[bytes] = ()) -> None:
    """Atomically write the record ``first``, then a spool file's records as they are, then ``rest``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write_records(fh, [first])
            if spooled is not None:
                with open(spooled, "rb") as src:
                    shutil.copyfileobj(src, fh, 4 * 2**20)
            write_records(fh, rest)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def stored_header(path: Path) -> pb.ReleaseHeader:
    first = pb.ReleaseFrame.FromString(next(read_records(path)))
    return pb.ReleaseHeader.FromString(first.header.header)


# -- receiver side ----------------------------------------------------------------------------------
KeyLookup = Callable[[str, str], Ed25519PublicKey | None]  # (sender_id, key_id) -> pinned key


@dataclass(frozen=True)
class VerifiedHeader:
    header: pb.ReleaseHeader
    mechanism: PublishedMechanism


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
    key = trusted(header.sender_id, header.sender_key_id)
    if key is None:
        raise WireError(
            "unauthenticated", f"sender {header.sender_id!r} with key {header.sender_key_id!r} is not pinned"
        )
    if not verify(key, signed.signature, signed.header):
        raise WireError("unauthenticated", "the header's signature does not verify")
    # From here on every header field is authentic (but a pinned sender can still be wrong or hostile).
    if header.format_version != FORMAT_VERSION:
        raise WireError("failed_precondition", f"unsupported format version {header.format_version}")
    if header.recipient_id != receiver_id:
        raise WireError("permission_denied", f"this release is addressed to {header.recipient_id!r}")
    if header.expires_at_unix_ms <= now_unix_ms:
        raise WireError("failed_precondition", "the release has expired")
    mechanism = mechanism_from_header(header)
    if header.bin_encoding != encoding_for(mechanism.bin_codes):
        raise WireError("invalid_argument", "the bin encoding does not match the number of bin codes")
    return VerifiedHeader(header, mechanism)


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


def decode_chunk(data: bytes, header: pb.ReleaseHeader) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """Decode one verified chunk into its example IDs and bin indices, checking their shapes."""
    chunk = pb.Chunk()
    chunk.ParseFromString(data)
    try:
        table = pa.ipc.open_stream(pa.py_buffer(chunk.example_ids)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise WireError("invalid_argument", f"chunk {chunk.index} has unreadable example IDs") from exc
    if table.schema != _ID_SCHEMA:
        raise WireError("invalid_argument", f"chunk {chunk.index} does not hold one utf8 example_id column")
    ids = table.column("example_id").combine_chunks()
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
