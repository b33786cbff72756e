"""The priors exchange of a feature-aware release (``priors.proto``), both halves: the labels party's
signed pricing request with its ID chunks, and the features party's signed priors with its group chunks
— how each side builds what it sends, and the structural checks of what arrives (size before parsing,
signature, addressing, expiry, counts, digest, the shape of every chunk).

Whether the priors are acceptable *as priors* (at most the G asked for, G × k within bounds, every
mass finite and non-negative) is checked by the labels party with ``labeldp.priors``, a layer above
this one; whether a tenant's grant lets a model price a sender's examples, by the features party.

Both heads carry the SHA-256 of the serialized chunks that follow, in order, so one signature covers a
whole stream. The answer's chunk ``i`` holds the groups of the request's chunk ``i``'s examples, in the
request's order, and no IDs: an answer cannot name an example the request did not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf.message import DecodeError

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import as_text, check_ids
from labeldp.common.identity import Identity, fingerprint, verify
from labeldp.common.inputs import is_clean_text, is_uuid
from labeldp.common.model_message import KeyLookup, for_tenant, verified_owners
from labeldp.common.wire.arrow_ids import read_ids
from labeldp.common.wire.format import CHUNK_MAX_EXAMPLES, WireError
from labeldp.common.wire.records import write_records
from labeldp.common.wire.sender import chunk_bounds, encode_ids
from labeldp.mechanisms.factory import LOSSES_BY_LABEL_TYPE
from labeldp.mechanisms.support import MAX_SUPPORT_SIZE
from labeldp.v1 import priors_pb2 as ppb

PRICING_FORMAT_VERSION = 1
NO_GROUP_CODE = 0xFFFF  # an example the model could not price (no feature row)
# a signed request: the public support (at most 262,144 points once G ≥ 1) and a few fields
MAX_REQUEST_BYTES = 4 * 2**20
# a signed priors header: G × k ≤ 262,144 doubles (2 MiB) with their framing, and a few fields
MAX_PRIORS_HEADER_BYTES = 4 * 2**20
GROUP_BYTES = 2  # uint16 little-endian per example
_GROUPS = np.dtype("<u2")


# --- the request (labels party → features party) ---------------------------------------------------


@dataclass(frozen=True)
class PricingAsk:
    """What the labels party states in a pricing request (all of it public)."""

    request_id: str
    sender_id: str
    recipient_id: str
    recipient_tenant: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    label_type: str
    loss: str
    support: tuple[float, ...]
    max_groups: int


@dataclass(frozen=True)
class SpooledIds:
    """ID chunks spooled to a file as serialized ``PricingFrame`` records, with what the head states
    about them; ``sizes``: each chunk's examples (the answer's chunks must match them)."""

    path: Path
    examples: int
    sizes: tuple[int, ...]
    digest: bytes


def spool_ids(path: Path, ids: pa.Array) -> SpooledIds:
    """Cut ``ids`` into chunks as a release's are cut, write them to ``path`` as ``PricingFrame``
    records and hash them in order (a retry re-signs a fresh head over the same chunks)."""
    digest, sizes = hashlib.sha256(), []
    with open(path, "wb") as fh:
        for index, (start, stop) in enumerate(chunk_bounds(ids)):
            chunk = ppb.PricingChunk(
                index=index, examples=stop - start, example_ids=encode_ids(ids.slice(start, stop - start))
            )
            digest.update(chunk.SerializeToString(deterministic=True))
            write_records(fh, [ppb.PricingFrame(chunk=chunk).SerializeToString(deterministic=True)])
            sizes.append(stop - start)
    return SpooledIds(path, len(ids), tuple(sizes), digest.digest())


def signed_request(ask: PricingAsk, identity: Identity, ids: SpooledIds) -> bytes:
    """The first frame of a pricing stream: the request over ``ids``, signed by ``identity``."""
    request = ppb.PricingRequest(
        format_version=PRICING_FORMAT_VERSION,
        request_id=ask.request_id,
        sender_id=ask.sender_id,
        sender_key_id=identity.key_id,
        recipient_id=ask.recipient_id,
        recipient_tenant=ask.recipient_tenant,
        created_at_unix_ms=ask.created_at_unix_ms,
        expires_at_unix_ms=ask.expires_at_unix_ms,
        label_type=ask.label_type,
        loss=ask.loss,
        support=list(ask.support),
        max_groups=ask.max_groups,
        example_count=ids.examples,
        chunk_count=len(ids.sizes),
        ids_sha256=ids.digest,
    )
    data = request.SerializeToString(deterministic=True)
    signed = ppb.SignedPricingRequest(request=data, signature=identity.sign(data))
    return ppb.PricingFrame(request=signed).SerializeToString(deterministic=True)


@dataclass(frozen=True)
class VerifiedRequest:
    request: ppb.PricingRequest
    owners: tuple[str | None, ...]  # of the pins the signature verified under


def _pricing_frame(data: bytes) -> ppb.PricingFrame:
    try:
        return ppb.PricingFrame.FromString(data)
    except DecodeError as exc:
        raise WireError("invalid_argument", "a frame is not a valid PricingFrame") from exc


def check_request(first: bytes, trusted: KeyLookup, receiver_id: str, now_unix_ms: int) -> VerifiedRequest:
    """Authenticate a pricing stream's first frame and check what it states, before any chunk is read
    (``WireError`` with the status to answer): its size, the signature against a key pinned by the
    tenant it names (``for_tenant``), then the version, the recipient, the expiry, the counts and the
    public parameters (a label type and loss the labels party knows, a support of at most
    ``MAX_SUPPORT_SIZE`` distinct finite points in increasing order)."""
    if len(first) > MAX_REQUEST_BYTES + 64:
        raise WireError("resource_exhausted", f"the signed request exceeds {MAX_REQUEST_BYTES} bytes")
    frame = _pricing_frame(first)
    if frame.WhichOneof("frame") != "request":
        raise WireError("invalid_argument", "the first frame must be the signed pricing request")
    signed = frame.request
    request = ppb.PricingRequest()
    try:
        request.ParseFromString(signed.request)
    except DecodeError as exc:
        raise WireError("unauthenticated", "the request is not a valid PricingRequest") from exc
    if not (is_clean_text(request.sender_id) and is_clean_text(request.sender_key_id, 80)):
        raise WireError("unauthenticated", "the request names no valid sender")
    if request.recipient_tenant and not is_uuid(request.recipient_tenant):
        raise WireError("invalid_argument", "recipient_tenant must be a tenant id (a UUID)")
    found = for_tenant(trusted(request.sender_id, request.sender_key_id), request.recipient_tenant)
    if not found:
        raise WireError(
            "unauthenticated",
            f"sender {request.sender_id!r} with key {request.sender_key_id!r} is not pinned"
            + (" by the tenant the request is for" if request.recipient_tenant else ""),
        )
    owners = verified_owners(found, signed.signature, signed.request)
    if not owners:
        raise WireError("unauthenticated", "the request's signature does not verify")
    # From here on every field is authentic (but a pinned sender can still be wrong or hostile).
    if request.format_version != PRICING_FORMAT_VERSION:
        raise WireError("failed_precondition", f"unsupported format version {request.format_version}")
    if not is_uuid(request.request_id):
        raise WireError("invalid_argument", "request_id must be a UUID (lowercase, 8-4-4-4-12)")
    if request.recipient_id != receiver_id:
        raise WireError("permission_denied", f"this request is addressed to {request.recipient_id!r}")
    if request.expires_at_unix_ms <= now_unix_ms:
        raise WireError("failed_precondition", "the request has expired")
    check_counts(request.example_count, request.chunk_count, "request")
    allowed = LOSSES_BY_LABEL_TYPE.get(request.label_type)  # type: ignore[call-overload]
    if allowed is None:
        raise WireError("invalid_argument", f"label_type must be one of {', '.join(LOSSES_BY_LABEL_TYPE)}")
    if request.loss not in allowed:
        raise WireError(
            "invalid_argument", f"{request.label_type} labels do not take the loss {request.loss!r}"
        )
    support = np.asarray(request.support, dtype=np.float64)
    if not 1 <= support.size <= MAX_SUPPORT_SIZE:
        raise WireError("invalid_argument", f"the support needs 1 to {MAX_SUPPORT_SIZE} points")
    if not np.isfinite(support).all() or np.any(np.diff(support) <= 0):
        raise WireError("invalid_argument", "the support must be finite and strictly increasing")
    return VerifiedRequest(request, tuple(owners))


def check_counts(examples: int, chunks: int, what: str) -> None:
    """Chunks as an honest sender cuts them: at least one, none empty, none over ``CHUNK_MAX_EXAMPLES``."""
    if chunks == 0 or chunks > examples or examples > chunks * CHUNK_MAX_EXAMPLES:
        raise WireError(
            "invalid_argument",
            f"the {what}'s {examples} examples cannot travel in {chunks} chunks of 1 to "
            f"{CHUNK_MAX_EXAMPLES} examples",
        )


@dataclass
class IdChunks:
    """A request's ID chunk frames, in order, through its digest and within a size limit; each chunk's
    example count is kept (the answer's chunks follow them)."""

    request: ppb.PricingRequest
    max_bytes: int
    sizes: list[int] = field(default_factory=list)
    bytes_seen: int = 0
    _digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def add(self, data: bytes) -> bytes:
        """Account for one frame; returns the chunk's serialized bytes (to be spooled, not decoded)."""
        frame = _pricing_frame(data)
        if frame.WhichOneof("frame") != "chunk":
            raise WireError("invalid_argument", "only the first frame may be the request")
        chunk = frame.chunk
        if chunk.index != len(self.sizes):
            raise WireError(
                "invalid_argument", f"chunk {chunk.index} arrived where {len(self.sizes)} was due"
            )
        if len(self.sizes) >= self.request.chunk_count:
            raise WireError("invalid_argument", "more chunks than the request announces")
        if not 0 < chunk.examples <= CHUNK_MAX_EXAMPLES:
            raise WireError(
                "invalid_argument", f"chunk {chunk.index} must hold 1 to {CHUNK_MAX_EXAMPLES} IDs"
            )
        serialized = chunk.SerializeToString(deterministic=True)
        self.bytes_seen += len(serialized)
        if self.bytes_seen > self.max_bytes:
            raise WireError("resource_exhausted", f"the request exceeds the limit of {self.max_bytes} bytes")
        self._digest.update(serialized)
        self.sizes.append(chunk.examples)
        return serialized

    def finish(self) -> None:
        if len(self.sizes) != self.request.chunk_count:
            raise WireError(
                "invalid_argument",
                f"stream ended after {len(self.sizes)} of {self.request.chunk_count} chunks",
            )
        if self._digest.digest() != self.request.ids_sha256:
            raise WireError("invalid_argument", "the chunks do not match the signed digest")
        if sum(self.sizes) != self.request.example_count:
            raise WireError("invalid_argument", "the example count does not match the request")


def decode_ids(data: bytes, offset: int) -> pa.Array:
    """One verified chunk's example IDs (bounded reader, then the upload rules); ``offset``: how many
    IDs earlier chunks held (errors name the example's position)."""
    chunk = ppb.PricingChunk.FromString(data)
    ids = read_ids(chunk)
    if len(ids) != chunk.examples:
        raise WireError("invalid_argument", f"chunk {chunk.index} is malformed")
    try:
        ids = as_text(ids, "example_id")
        check_ids(ids, offset)
    except DomainError as exc:
        rows = exc.extra.get("rows") or []
        where = f" (example {rows[0]} of the request)" if rows else ""
        raise WireError("invalid_argument", f"chunk {chunk.index}: {exc.detail}{where}") from exc
    return ids


# --- the answer (features party → labels party) ----------------------------------------------------


@dataclass(frozen=True)
class PriorsAnswer:
    """What the features party states in its answer; ``priors`` is G × k, a row per group."""

    priors_id: str
    request: ppb.PricingRequest
    sender_id: str
    created_at_unix_ms: int
    expires_at_unix_ms: int
    model_id: str
    rule: str
    priors: npt.NDArray[np.float64]


def answer_frames(
    answer: PriorsAnswer, groups: npt.NDArray[np.int64], sizes: list[int], identity: Identity
) -> list[bytes]:
    """The whole answer: the signed header, then one chunk of group codes per request chunk
    (``sizes``), each example's group in request order (``NO_GROUP_CODE`` where ``groups`` is < 0)."""
    if groups.size != sum(sizes):
        raise ValueError("one group per requested example")  # a bug, never a short answer
    codes = np.where(groups < 0, NO_GROUP_CODE, groups).astype(_GROUPS)
    chunks, start, digest = [], 0, hashlib.sha256()
    for index, size in enumerate(sizes):
        chunk = ppb.GroupChunk(index=index, examples=size, groups=codes[start : start + size].tobytes())
        digest.update(chunk.SerializeToString(deterministic=True))
        chunks.append(chunk)
        start += size
    request = answer.request
    raw_key = identity.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    header = ppb.PriorsHeader(
        format_version=PRICING_FORMAT_VERSION,
        priors_id=answer.priors_id,
        request_id=request.request_id,
        sender_id=answer.sender_id,
        sender_key_id=identity.key_id,
        sender_public_key=raw_key,
        recipient_id=request.sender_id,
        recipient_tenant=request.recipient_tenant,
        created_at_unix_ms=answer.created_at_unix_ms,
        expires_at_unix_ms=answer.expires_at_unix_ms,
        model_id=answer.model_id,
        rule=answer.rule,
        support=list(request.support),
        groups=[ppb.GroupPrior(masses=row.tolist()) for row in answer.priors],
        example_count=request.example_count,
        chunk_count=len(sizes),
        payload_sha256=digest.digest(),
    )
    data = header.SerializeToString(deterministic=True)
    first = ppb.PriorsFrame(header=ppb.SignedPriors(header=data, signature=identity.sign(data)))
    return [
        first.SerializeToString(deterministic=True),
        *(ppb.PriorsFrame(chunk=c).SerializeToString(deterministic=True) for c in chunks),
    ]


def _priors_frame(data: bytes) -> ppb.PriorsFrame:
    try:
        return ppb.PriorsFrame.FromString(data)
    except DecodeError as exc:
        raise WireError("invalid_argument", "a frame is not a valid PriorsFrame") from exc


def open_priors(first: bytes, pinned: str) -> tuple[ppb.PriorsHeader, bytes]:
    """The answer's first frame, authenticated: at most ``MAX_PRIORS_HEADER_BYTES`` before it is
    parsed, its public key the one whose fingerprint the labels party pinned (``pinned``), its signature
    by that key. Returns the header and the signed frame's bytes (kept for audit). What the header
    states is checked by the caller."""
    if len(first) > MAX_PRIORS_HEADER_BYTES + 256:
        raise WireError("resource_exhausted", f"the priors header exceeds {MAX_PRIORS_HEADER_BYTES} bytes")
    frame = _priors_frame(first)
    if frame.WhichOneof("frame") != "header":
        raise WireError("invalid_argument", "the first frame of the answer must be the signed priors")
    signed = frame.header
    header = ppb.PriorsHeader()
    try:
        header.ParseFromString(signed.header)
    except DecodeError as exc:
        raise WireError("unauthenticated", "the answer's header is not a valid PriorsHeader") from exc
    if len(header.sender_public_key) != 32:
        raise WireError("unauthenticated", "the answer carries no Ed25519 public key")
    key = Ed25519PublicKey.from_public_bytes(header.sender_public_key)
    if fingerprint(key) != pinned:
        raise WireError(
            "unauthenticated", "the answer is signed by another key than the recipient's pinned one"
        )
    if not verify(key, signed.signature, signed.header):
        raise WireError("unauthenticated", "the answer's signature does not verify")
    return header, first


@dataclass
class GroupChunks:
    """An answer's group chunk frames, in order, through its digest: each the size of the request
    chunk it answers, each code a group below G or ``NO_GROUP_CODE``. ``codes`` gathers them."""

    header: ppb.PriorsHeader
    sizes: tuple[int, ...]
    codes: list[npt.NDArray[np.uint16]] = field(default_factory=list)
    _digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def add(self, data: bytes) -> None:
        frame = _priors_frame(data)
        if frame.WhichOneof("frame") != "chunk":
            raise WireError("invalid_argument", "only the first frame of the answer may be the header")
        chunk, at = frame.chunk, len(self.codes)
        if chunk.index != at or at >= len(self.sizes):
            raise WireError("invalid_argument", f"group chunk {chunk.index} arrived where {at} was due")
        if chunk.examples != self.sizes[at] or len(chunk.groups) != GROUP_BYTES * self.sizes[at]:
            raise WireError(
                "invalid_argument",
                f"group chunk {at} must hold the {self.sizes[at]} groups of request chunk {at}",
            )
        self._digest.update(chunk.SerializeToString(deterministic=True))
        codes = np.frombuffer(chunk.groups, dtype=_GROUPS)
        count = len(self.header.groups)
        if np.any((codes >= count) & (codes != NO_GROUP_CODE)):
            raise WireError("invalid_argument", f"group chunk {at} names a group ≥ G = {count}")
        self.codes.append(codes)

    def finish(self) -> npt.NDArray[np.int64]:
        """Every group, in request order (``-1``: none), once the digest matches."""
        if len(self.codes) != len(self.sizes):
            raise WireError(
                "invalid_argument", f"the answer ended after {len(self.codes)} of {len(self.sizes)} chunks"
            )
        if self._digest.digest() != self.header.payload_sha256:
            raise WireError("invalid_argument", "the group chunks do not match the signed digest")
        joined = np.concatenate(self.codes) if self.codes else np.zeros(0, dtype=_GROUPS)
        return np.where(joined == NO_GROUP_CODE, -1, joined.astype(np.int64))


def answer_bytes_bound(examples: int, chunks: int) -> int:
    """The most an honest answer to a request of ``examples`` IDs in ``chunks`` chunks takes on the
    wire: the header's bound and two bytes per example, with each chunk's framing."""
    return MAX_PRIORS_HEADER_BYTES + GROUP_BYTES * examples + 32 * chunks + 1024


__all__ = [
    "GROUP_BYTES",
    "MAX_PRIORS_HEADER_BYTES",
    "MAX_REQUEST_BYTES",
    "NO_GROUP_CODE",
    "PRICING_FORMAT_VERSION",
    "GroupChunks",
    "IdChunks",
    "PricingAsk",
    "PriorsAnswer",
    "SpooledIds",
    "VerifiedRequest",
    "answer_bytes_bound",
    "answer_frames",
    "check_counts",
    "check_request",
    "decode_ids",
    "open_priors",
    "signed_request",
    "spool_ids",
]
