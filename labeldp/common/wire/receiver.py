"""The receiver's side: the signature checked against the pinned key(s) of the claimed sender *before*
any chunk is read, then the recipient, the expiry, the counts, the published mechanism and the label
type (one the labels party knows, taking the mechanism's loss: the features party stores and shows it
and trains by it); then the chunks streamed through the same hash, and nothing decoded until the hash
matches.

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
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import as_text, check_ids
from labeldp.common.inputs import is_clean_text, is_uuid
from labeldp.common.model_message import KeyLookup, for_tenant, verified_owners
from labeldp.common.wire.arrow_ids import read_ids
from labeldp.common.wire.format import (
    CHUNK_MAX_EXAMPLES,
    FORMAT_VERSION,
    WireError,
)
from labeldp.common.wire.mechanism import groups_from_header, is_user_level, mechanism_from_header
from labeldp.common.wire.sender import NO_GROUP_CODE, encoding_for
from labeldp.mechanisms.factory import LOSSES_BY_LABEL_TYPE
from labeldp.mechanisms.grouped import MAX_GROUP_CELLS, MAX_GROUPS
from labeldp.mechanisms.published import MAX_BINS, PublishedMechanism
from labeldp.mechanisms.support import MAX_SUPPORT_SIZE
from labeldp.mechanisms.unbiased_weights import (
    MAX_UNBIASED_CELLS,
    MAX_UNBIASED_OUTPUTS,
    MAX_UNBIASED_SUPPORT,
)
from labeldp.v1 import delivery_pb2 as pb

__all__ = [
    "ChunkStream",
    "KeyLookup",
    "VerifiedHeader",
    "check_fits",
    "check_header",
    "decode_chunk",
]

# A header without ``support_bins`` (a sender from before it existed) has the receiver derive them,
# comparing every support point with every bin: at most this many pairs (about 0.3 s).
OLD_SENDER_MAX_PAIRS = 10_000_000


@dataclass(frozen=True)
class VerifiedHeader:
    header: pb.ReleaseHeader
    mechanism: PublishedMechanism
    owners: tuple[str | None, ...] = (None,)  # of the pins the signature verified under
    # a feature-aware release: each group's mechanism (``groups_from_header``), in group order
    groups: tuple[PublishedMechanism, ...] = ()


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
    if header.recipient_tenant and not is_uuid(header.recipient_tenant):
        raise WireError("invalid_argument", "recipient_tenant must be a tenant id (a UUID)")
    # only the named tenant's pins (and legacy ones) are tried: the signature then covers the name
    found = for_tenant(trusted(header.sender_id, header.sender_key_id), header.recipient_tenant)
    if not found:
        raise WireError(
            "unauthenticated",
            f"sender {header.sender_id!r} with key {header.sender_key_id!r} is not pinned"
            + (" by the tenant the release is for" if header.recipient_tenant else ""),
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
    _check_groups(header)
    mechanism = mechanism_from_header(header)
    groups = groups_from_header(header)
    allowed = LOSSES_BY_LABEL_TYPE.get(header.label_type)  # type: ignore[call-overload]
    if allowed is None:
        raise WireError("invalid_argument", f"label_type must be one of {', '.join(LOSSES_BY_LABEL_TYPE)}")
    if mechanism.loss not in allowed:
        raise WireError(
            "invalid_argument", f"{header.label_type} labels do not take the loss {mechanism.loss!r}"
        )
    codes = max([mechanism.bin_codes, *(g.bin_codes for g in groups)])
    if header.bin_encoding != encoding_for(codes):
        raise WireError("invalid_argument", "the bin encoding does not match the number of bin codes")
    return VerifiedHeader(header, mechanism, tuple(owners), groups)


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
    unbiased_lists = max(len(m.base_weights), len(m.window_starts), len(m.window_offsets))
    if m.kind == "unbiased":  # its integer rows are rebuilt to be checked: k × outputs cells
        outputs = max(len(m.bin_values), len(m.base_weights))
        windows = max(len(m.window_starts), len(m.window_offsets))
        if (
            max(support, windows) > MAX_UNBIASED_SUPPORT
            or outputs > MAX_UNBIASED_OUTPUTS
            or max(support, windows) * outputs > MAX_UNBIASED_CELLS
        ):
            raise WireError(
                "invalid_argument",
                f"an unbiased randomizer has at most {MAX_UNBIASED_SUPPORT} support points, "
                f"{MAX_UNBIASED_OUTPUTS} outputs and {MAX_UNBIASED_CELLS} support points × outputs",
            )
        return
    if unbiased_lists:
        raise WireError("invalid_argument", "base_weights and the windows belong to kind unbiased only")
    if not len(m.support_bins) and m.kind != "rr_top_k":  # RR-Top-k's classes map in linear time
        bins = min(len(m.bin_lower), len(m.bin_upper))
        if support * bins > OLD_SENDER_MAX_PAIRS:
            raise WireError(
                "invalid_argument",
                f"without support_bins a message may state at most {OLD_SENDER_MAX_PAIRS} support points "
                f"× bins (this one: {support} × {bins}); send support_bins",
            )


_USER_FIELDS = ("privacy_unit", "contribution_bound", "prior_contribution_bound", "epsilon_bound",
                "epsilon_example")  # fmt: skip
PRIOR_SUM_TOLERANCE = 1e-9


def _check_groups(header: pb.ReleaseHeader) -> None:
    """A feature-aware release's groups, checked field by field before any mechanism is derived from
    them: a priors id exactly when there are groups; at most ``MAX_GROUPS`` groups and
    ``MAX_GROUP_CELLS`` prior masses in all; each group's prior and support map one entry per support
    point, within ``MAX_BINS`` bins and no bin intervals (derived; the sender leaves them out); each
    prior a distribution (finite, non-negative, summing to 1 within ``PRIOR_SUM_TOLERANCE``); the
    kind, the loss and (user level) the user fields the header's own mechanism states. The ε of each
    group is checked by ``groups_from_header``, and the rest by ``PublishedMechanism`` itself."""
    groups, support = header.groups, len(header.prior.support)
    if not groups:
        if header.priors_id:
            raise WireError("invalid_argument", "priors_id is set but the release has no groups")
        return
    if not is_uuid(header.priors_id):
        raise WireError("invalid_argument", "a release with groups names its priors_id (a UUID)")
    if len(groups) > MAX_GROUPS:
        raise WireError("invalid_argument", f"the release has more than {MAX_GROUPS} groups")
    if len(groups) * support > MAX_GROUP_CELLS:
        raise WireError(
            "invalid_argument",
            f"groups × support points must be at most {MAX_GROUP_CELLS} (here {len(groups)} × {support})",
        )
    own = header.mechanism
    if groups and own.kind not in ("rr_on_bins", "rr_top_k"):  # the unbiased randomizer takes no priors
        raise WireError("invalid_argument", f"a release of kind {own.kind!r} carries no groups")
    for g, group in enumerate(groups):
        m = group.mechanism
        if len(group.prior) != support or len(m.support_bins) != support:
            raise WireError(
                "invalid_argument", f"group {g} needs one prior mass and one support bin per support point"
            )
        if len(m.bin_values) > MAX_BINS:
            raise WireError("invalid_argument", f"group {g}'s mechanism has more than {MAX_BINS} bins")
        if len(m.bin_lower) or len(m.bin_upper):
            raise WireError("invalid_argument", f"group {g}'s mechanism carries bin intervals (it must not)")
        prior = np.asarray(group.prior, dtype=np.float64)
        if not np.all(np.isfinite(prior)) or np.any(prior < 0):
            raise WireError("invalid_argument", f"group {g}'s prior has a negative or non-finite mass")
        if abs(float(prior.sum()) - 1.0) > PRIOR_SUM_TOLERANCE:
            raise WireError("invalid_argument", f"group {g}'s prior does not sum to 1")
        if (m.kind, m.loss or "squared") != (own.kind, own.loss or "squared"):
            raise WireError(
                "invalid_argument", f"group {g}'s kind and loss differ from the release's mechanism"
            )
        if is_user_level(header) and any(getattr(m, f) != getattr(own, f) for f in _USER_FIELDS):
            raise WireError(
                "invalid_argument", f"group {g}'s user-level fields differ from the release's mechanism"
            )
        if not is_user_level(header) and m.privacy_unit not in ("", "example"):
            raise WireError("invalid_argument", f"group {g}'s privacy unit differs from the release's")


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


def decode_chunk(
    data: bytes, header: pb.ReleaseHeader, offset: int = 0
) -> tuple[pa.Array, npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """Decode one verified chunk into its example IDs, bin indices and (a release with groups) each
    example's group (``-1``: the header's own mechanism), checking their shapes, each bin against the
    codes of the mechanism that released it, and the IDs by the upload rules (UTF-8 text, present, at
    most 256 bytes, no control characters); ``offset`` is how many examples earlier chunks held
    (errors name the example's position)."""
    chunk = pb.Chunk()
    chunk.ParseFromString(data)
    if not 0 < chunk.examples <= CHUNK_MAX_EXAMPLES:
        raise WireError(
            "invalid_argument", f"chunk {chunk.index} must hold 1 to {CHUNK_MAX_EXAMPLES} examples"
        )
    ids = read_ids(chunk)
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
    groups = _chunk_groups(chunk, header)
    if groups is not None:
        # a grouped example's bin counts within its group's bins (it is never capped: no capped code)
        group_codes = np.array([len(g.mechanism.bin_values) for g in header.groups] + [codes], np.int64)
        codes_of = group_codes[np.where(groups < 0, len(header.groups), groups)]
        if bins.size and np.any(bins >= codes_of):
            raise WireError("invalid_argument", f"chunk {chunk.index} has a bin index out of range")
    elif bins.size and int(bins.max()) >= codes:
        raise WireError("invalid_argument", f"chunk {chunk.index} has a bin index out of range")
    return ids, bins, groups


def _chunk_groups(chunk: pb.Chunk, header: pb.ReleaseHeader) -> npt.NDArray[np.int64] | None:
    """A chunk's groups: exactly two bytes per example when the header has groups (each below G, or
    ``NO_GROUP_CODE``), none otherwise."""
    if not header.groups:
        if chunk.groups:
            raise WireError(
                "invalid_argument", f"chunk {chunk.index} carries groups the header does not have"
            )
        return None
    if len(chunk.groups) != 2 * chunk.examples:
        raise WireError("invalid_argument", f"chunk {chunk.index} needs two bytes of group per example")
    codes = np.frombuffer(chunk.groups, dtype="<u2").astype(np.int64)
    if np.any((codes >= len(header.groups)) & (codes != NO_GROUP_CODE)):
        raise WireError("invalid_argument", f"chunk {chunk.index} names a group the header does not have")
    return np.where(codes == NO_GROUP_CODE, -1, codes)
