"""Building and checking the one signed message a release travels as (``labeldp.v1``).

The sender serializes the release into chunks, hashes the serialized chunks in order, puts the hash
into the header and signs the header's exact bytes. The receiver checks the signature against the
pinned key of the claimed sender *before* reading any chunk, then the recipient and expiry, then
streams the chunks through the same hash; nothing is decoded until the hash matches.

Chunks carry the example IDs as a zstd-compressed Arrow string column (so framing costs almost
nothing on the wire) and the bins packed as uint8 (m <= 256) or little-endian uint16.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from labeldp.common.identity import Identity, verify
from labeldp.v1 import delivery_pb2 as pb

FORMAT_VERSION = 1
CHUNK_MAX_EXAMPLES = 262_144
CHUNK_MAX_ID_BYTES = 2 * 2**20  # keeps every frame well under the 8 MiB message limit below
MAX_MESSAGE_BYTES = 8 * 2**20
_ID_SCHEMA = pa.schema([("example_id", pa.string())])


class WireError(Exception):
    """A rejected message. ``code`` names the gRPC status the receiver answers with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- sender side ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """What the labels party puts in a message (all of it already privatized or public)."""

    release_id: str
    sender_id: str
    recipient_id: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    label_type: str
    epsilon_total: float
    epsilon_prior: float
    epsilon_randomize: float
    mechanism: pb.Mechanism
    prior: pb.NoisyPrior
    example_ids: pa.Array
    bins: npt.NDArray[np.integer]
    num_bins: int


def encoding_for(num_bins: int) -> pb.BinEncoding:
    return pb.BIN_ENCODING_UINT8 if num_bins <= 256 else pb.BIN_ENCODING_UINT16_LE


def _pack_bins(bins: npt.NDArray[np.integer], encoding: pb.BinEncoding) -> bytes:
    dtype = np.uint8 if encoding == pb.BIN_ENCODING_UINT8 else np.dtype("<u2")
    return np.asarray(bins).astype(dtype).tobytes()


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


def build_frames(release: Release, identity: Identity) -> list[pb.ReleaseFrame]:
    """The whole message: the signed header frame, then the chunk frames."""
    ids = release.example_ids.cast(pa.string())
    if len(ids) != len(release.bins):
        raise ValueError("example_ids and bins must have the same length")
    encoding = encoding_for(release.num_bins)
    chunks = [
        pb.Chunk(
            index=i,
            examples=stop - start,
            example_ids=_encode_ids(ids.slice(start, stop - start)),
            bins=_pack_bins(release.bins[start:stop], encoding),
        )
        for i, (start, stop) in enumerate(_chunk_bounds(ids))
    ]
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.SerializeToString(deterministic=True))
    header = pb.ReleaseHeader(
        format_version=FORMAT_VERSION,
        release_id=release.release_id,
        sender_id=release.sender_id,
        sender_key_id=identity.key_id,
        recipient_id=release.recipient_id,
        created_at_unix_ms=release.created_at_unix_ms,
        expires_at_unix_ms=release.expires_at_unix_ms,
        label_type=release.label_type,
        epsilon_total=release.epsilon_total,
        epsilon_prior=release.epsilon_prior,
        epsilon_randomize=release.epsilon_randomize,
        mechanism=release.mechanism,
        prior=release.prior,
        example_count=len(ids),
        chunk_count=len(chunks),
        payload_sha256=digest.digest(),
        bin_encoding=encoding,
    )
    header_bytes = header.SerializeToString(deterministic=True)
    signed = pb.SignedHeader(header=header_bytes, signature=identity.sign(header_bytes))
    return [pb.ReleaseFrame(header=signed), *(pb.ReleaseFrame(chunk=c) for c in chunks)]


# -- receiver side ----------------------------------------------------------------------------------
KeyLookup = Callable[[str, str], Ed25519PublicKey | None]  # (sender_id, key_id) -> pinned key


def check_header(
    frame: pb.ReleaseFrame, trusted: KeyLookup, receiver_id: str, now_unix_ms: int
) -> pb.ReleaseHeader:
    """Authenticate the header frame; raises ``WireError`` with the status to answer."""
    if frame.WhichOneof("frame") != "header":
        raise WireError("invalid_argument", "the first frame must be the signed header")
    signed = frame.header
    header = pb.ReleaseHeader()
    try:
        header.ParseFromString(signed.header)
    except Exception as exc:  # protobuf raises DecodeError subclasses of Exception
        raise WireError("unauthenticated", "the header is not a valid ReleaseHeader") from exc
    key = trusted(header.sender_id, header.sender_key_id)
    if key is None:
        raise WireError(
            "unauthenticated", f"sender {header.sender_id!r} with key {header.sender_key_id!r} is not pinned"
        )
    if not verify(key, signed.signature, signed.header):
        raise WireError("unauthenticated", "the header's signature does not verify")
    # From here on every header field is authentic.
    if header.format_version != FORMAT_VERSION:
        raise WireError("failed_precondition", f"unsupported format version {header.format_version}")
    if header.recipient_id != receiver_id:
        raise WireError("permission_denied", f"this release is addressed to {header.recipient_id!r}")
    if header.expires_at_unix_ms <= now_unix_ms:
        raise WireError("failed_precondition", "the release has expired")
    if header.bin_encoding not in (pb.BIN_ENCODING_UINT8, pb.BIN_ENCODING_UINT16_LE):
        raise WireError("invalid_argument", "unknown bin encoding")
    return header


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
    ids = pa.ipc.open_stream(pa.py_buffer(chunk.example_ids)).read_all().column("example_id").combine_chunks()
    width = 1 if header.bin_encoding == pb.BIN_ENCODING_UINT8 else 2
    dtype = np.uint8 if width == 1 else np.dtype("<u2")
    bins = np.frombuffer(chunk.bins, dtype=dtype).astype(np.int64)
    if len(ids) != chunk.examples or bins.size != chunk.examples:
        raise WireError("invalid_argument", f"chunk {chunk.index} is malformed")
    if bins.size and int(bins.max()) >= len(header.mechanism.bin_values):
        raise WireError("invalid_argument", f"chunk {chunk.index} has a bin index out of range")
    return ids, bins
