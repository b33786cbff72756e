"""The sender's side: a release serialized into chunks, the SHA-256 of the serialized chunks in
order put into the header, and the header's exact bytes signed — one signature covers the whole
release."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from labeldp.common.identity import Identity
from labeldp.common.wire.format import CHUNK_MAX_EXAMPLES, CHUNK_MAX_ID_BYTES, FORMAT_VERSION, ID_SCHEMA
from labeldp.common.wire.mechanism import group_to_proto, mechanism_to_proto
from labeldp.common.wire.records import store_records, write_records
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.v1 import delivery_pb2 as pb


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
    # the recipient's tenant it is for (empty: none named, as a message from before the field)
    recipient_tenant: str = field(default="", kw_only=True)
    # a feature-aware release: each group's mechanism (its prior included) and the stored priors'
    # id; every piece then carries each example's group (``NO_GROUP``: released by ``mechanism``)
    groups: tuple[PublishedMechanism, ...] = field(default=(), kw_only=True)
    priors_id: str = field(default="", kw_only=True)

    @property
    def bin_codes(self) -> int:
        """How many bin codes the chunks may carry: the most of any mechanism the release used."""
        return max([self.mechanism.bin_codes, *(g.bin_codes for g in self.groups)])


@dataclass(frozen=True)
class ReleaseMessage(MessageHeader):
    """A whole message in memory: the header and the released (example ID, bin) pairs."""

    example_ids: pa.Array
    bins: npt.NDArray[np.integer]
    example_groups: npt.NDArray[np.integer] | None = None  # a grouped release: -1 for no group


Piece = tuple[pa.Array, npt.NDArray[np.integer]]  # (example IDs, bins), in message order
GroupedPiece = tuple[pa.Array, npt.NDArray[np.integer], npt.NDArray[np.integer]]  # and each one's group
Pieces = Iterable[Piece | GroupedPiece]
NO_GROUP_CODE = 0xFFFF  # Chunk.groups: the example was released by the header's own mechanism


def encoding_for(num_bins: int) -> pb.BinEncoding:
    return pb.BIN_ENCODING_UINT8 if num_bins <= 256 else pb.BIN_ENCODING_UINT16_LE


def _pack_bins(bins: npt.NDArray[np.integer], encoding: pb.BinEncoding) -> bytes:
    dtype = np.uint8 if encoding == pb.BIN_ENCODING_UINT8 else np.dtype("<u2")
    arr = np.asarray(bins)
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) > np.iinfo(dtype).max):
        raise ValueError("bin indices do not fit the bin encoding")  # a bug, never silent wrap-around
    return arr.astype(dtype).tobytes()


def encode_ids(ids: pa.Array) -> bytes:
    """IDs as a chunk carries them: an Arrow IPC stream of one utf8 column, zstd-compressed buffers."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, ID_SCHEMA, options=options) as writer:
        writer.write_batch(pa.record_batch([ids], schema=ID_SCHEMA))
    return bytes(sink.getvalue().to_pybytes())


def chunk_bounds(ids: pa.Array) -> Iterator[tuple[int, int]]:
    """Where an honest sender cuts ``ids`` into chunks: at most ``CHUNK_MAX_EXAMPLES`` examples and
    ``CHUNK_MAX_ID_BYTES`` of IDs each (one ID alone may pass the latter), none empty."""
    lengths = np.asarray(pa.compute.binary_length(ids).to_numpy(zero_copy_only=False), dtype=np.int64)
    start, n = 0, len(ids)
    while start < n:
        stop = min(n, start + CHUNK_MAX_EXAMPLES)
        cumulative = np.cumsum(lengths[start:stop])
        fits = int(np.searchsorted(cumulative, CHUNK_MAX_ID_BYTES, side="right"))
        stop = start + max(1, fits)
        yield start, stop
        start = stop


def _pack_groups(groups: npt.NDArray[np.integer], count: int) -> bytes:
    """Groups as a chunk carries them: uint16 LE, ``NO_GROUP_CODE`` for -1 (no group)."""
    arr = np.asarray(groups, dtype=np.int64)
    if arr.size and (int(arr.min()) < -1 or int(arr.max()) >= count):
        raise ValueError("a group index is out of range")  # a bug, never silent wrap-around
    return np.where(arr < 0, NO_GROUP_CODE, arr).astype("<u2").tobytes()


def _chunks(pieces: Pieces, encoding: pb.BinEncoding, group_count: int = 0) -> Iterator[pb.Chunk]:
    """The chunk frames of the pieces, numbered in order (a piece never shares a chunk); with
    ``group_count`` groups every piece must carry its examples' groups."""
    index = 0
    for piece in pieces:
        example_ids, bins = piece[0], piece[1]
        groups = piece[2] if len(piece) == 3 else None
        if (groups is None) != (group_count == 0):
            raise ValueError("a grouped release's pieces carry groups, and only theirs do")
        ids = example_ids.cast(pa.string())
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        if len(ids) != len(bins) or (groups is not None and len(groups) != len(bins)):
            raise ValueError("example_ids, bins and groups must have the same length")
        for start, stop in chunk_bounds(ids):
            yield pb.Chunk(
                index=index,
                examples=stop - start,
                example_ids=encode_ids(ids.slice(start, stop - start)),
                bins=_pack_bins(bins[start:stop], encoding),
                groups=b"" if groups is None else _pack_groups(groups[start:stop], group_count),
            )
            index += 1


def _signed_header(
    release: MessageHeader, identity: Identity, examples: int, chunks: int, digest: bytes
) -> pb.ReleaseFrame:
    fields = mechanism_to_proto(release.mechanism)
    groups = [group_to_proto(g) for g in release.groups]
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
        bin_encoding=encoding_for(release.bin_codes),
        recipient_tenant=release.recipient_tenant,
        groups=groups,
        priors_id=release.priors_id,
    )
    header_bytes = header.SerializeToString(deterministic=True)
    return pb.ReleaseFrame(header=pb.SignedHeader(header=header_bytes, signature=identity.sign(header_bytes)))


def build_frames(release: ReleaseMessage, identity: Identity) -> list[pb.ReleaseFrame]:
    """The whole message in memory: the signed header frame, then the chunk frames."""
    encoding = encoding_for(release.bin_codes)
    piece: Piece | GroupedPiece = (release.example_ids, release.bins)
    if release.groups:
        if release.example_groups is None:
            raise ValueError("a grouped release needs each example's group")
        piece = (release.example_ids, release.bins, release.example_groups)
    chunks = list(_chunks([piece], encoding, len(release.groups)))
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
    encoding = encoding_for(release.bin_codes)
    path.parent.mkdir(parents=True, exist_ok=True)
    spool = path.with_name(f".{path.name}.{uuid.uuid4().hex}.chunks")
    try:
        digest, examples, count = hashlib.sha256(), 0, 0
        with open(spool, "wb") as fh:
            for chunk in _chunks(pieces, encoding, len(release.groups)):
                digest.update(chunk.SerializeToString(deterministic=True))
                write_records(fh, [pb.ReleaseFrame(chunk=chunk).SerializeToString(deterministic=True)])
                examples, count = examples + chunk.examples, count + 1
        header = _signed_header(release, identity, examples, count, digest.digest())
        store_records(path, header.SerializeToString(deterministic=True), spool)
    finally:
        spool.unlink(missing_ok=True)
