"""The receiver's side: the signature checked against the pinned key of the claimed sender *before*
any chunk is read, then the recipient, the expiry and the published mechanism; then the chunks
streamed through the same hash, and nothing decoded until the hash matches."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from labeldp.common.identity import verify
from labeldp.common.inputs import is_clean_text, is_uuid
from labeldp.common.wire.format import FORMAT_VERSION, ID_SCHEMA, WireError
from labeldp.common.wire.mechanism import mechanism_from_header
from labeldp.common.wire.sender import encoding_for
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.v1 import delivery_pb2 as pb

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
    if table.schema != ID_SCHEMA:
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
