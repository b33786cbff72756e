"""Feature-aware releases at the receiver, over real gRPC: a grouped message is stored with each
example's group, and a hostile one — groups out of bounds, a prior that is no distribution, a group
mechanism inconsistent with the header, chunk groups of the wrong shape or naming no group, a bin past
its own mechanism's codes — is refused with INVALID_ARGUMENT and a clear detail, nothing stored."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeldp.common.wire.receiver import check_header, decode_chunk
from labeldp.common.wire.sender import NO_GROUP_CODE, ReleaseMessage, build_frames
from labeldp.mechanisms import MAX_GROUP_CELLS, MAX_GROUPS, PublishedMechanism, RROnBins, integer_grid
from labeldp.v1 import delivery_pb2 as pb
from tests.support.messages import RECEIVER, SENDER, grouped_message, identity_bins
from tests.support.receiver import Harness, signed, split, start

K = 6  # support 0..5; the release's own mechanism has a bin per point, each group two bins
N = 300


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = start(tmp_path)
    yield harness
    harness.channel.close()
    harness.server.stop(None)


def two_bins(prior: list[float], epsilon: float = 1.0) -> PublishedMechanism:
    """A group's mechanism at the whole ε: RR-on-Bins with the bins {0,1,2} and {3,4,5}."""
    support = integer_grid(0, K - 1)
    mechanism = RROnBins(epsilon, support, np.array([0, 0, 0, 1, 1, 1]), np.array([1.0, 4.0]))
    return mechanism.describe(prior=np.asarray(prior), epsilon_prior=0.0, epsilon_total=epsilon)


def grouped(n: int = N) -> ReleaseMessage:
    """A release of ``n`` examples: groups 0 and 1 (two bins each) and examples without a group
    (the release's own six bins); the bins are arbitrary (the receiver cannot tell)."""
    now = int(time.time() * 1000)
    groups = np.arange(n) % 3 - 1  # -1, 0, 1, …
    bins = np.where(groups < 0, np.arange(n) % K, np.arange(n) % 2)
    return ReleaseMessage(
        release_id=str(uuid.uuid4()),
        sender_id=SENDER,
        recipient_id=RECEIVER,
        created_at_unix_ms=now,
        expires_at_unix_ms=now + 3_600_000,
        label_type="count",
        mechanism=identity_bins(K),  # ε₁ 0.05 + ε₂ 0.95 = 1.0
        groups=(two_bins([0.5, 0.3, 0.1, 0.05, 0.03, 0.02]), two_bins([0.02, 0.03, 0.05, 0.1, 0.3, 0.5])),
        priors_id=str(uuid.uuid4()),
        example_ids=pa.array([f"g{i:05d}" for i in range(n)]),
        bins=bins,
        example_groups=groups,
    )


def refused(h: Harness, frames: list[pb.ReleaseFrame]) -> str:
    with pytest.raises(grpc.RpcError) as info:
        h.stub.DeliverRelease(iter(frames), timeout=60)
    assert h.stored() == 0 and h.no_leftovers()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    return str(info.value.details())


def test_a_grouped_release_is_stored_with_each_examples_group(h: Harness) -> None:
    message = grouped()
    receipt = h.stub.DeliverRelease(iter(build_frames(message, h.sender)), timeout=60)
    assert receipt.example_count == N and h.stored() == 1
    stored = pq.read_table(h.stored_file(message.release_id))
    assert stored.schema.field("group").type == pa.int16()
    assert stored.column("example_id").to_pylist() == message.example_ids.to_pylist()
    assert message.example_groups is not None
    assert np.array_equal(stored.column("group").to_numpy(), message.example_groups)
    assert np.array_equal(stored.column("bin").to_numpy(), message.bins)
    # the header's groups are the ones sent (without their derived bin intervals)
    header, chunks = split(build_frames(message, h.sender))
    verified = check_header(build_frames(message, h.sender)[0], h.receiver.senders.pins, RECEIVER, 0)
    assert verified.groups == message.groups and verified.mechanism == message.mechanism
    assert decode_chunk(chunks[0].SerializeToString(), header)[2] is not None
    # a release without groups stores no group column, and decodes none
    plain = build_frames(grouped_free(), h.sender)
    h.stub.DeliverRelease(iter(plain), timeout=60)
    header, chunks = split(plain)
    assert decode_chunk(chunks[0].SerializeToString(), header)[2] is None


def grouped_free() -> ReleaseMessage:
    m = grouped()
    return ReleaseMessage(
        **{
            **m.__dict__,
            "release_id": str(uuid.uuid4()),
            "groups": (),
            "priors_id": "",
            "example_groups": None,
        }
    )


Header = Callable[[pb.ReleaseHeader], None]


def _many_groups(count: int) -> Header:
    def change(header: pb.ReleaseHeader) -> None:
        while len(header.groups) < count:
            header.groups.add().CopyFrom(header.groups[0])

    return change


def _set(path: str, value: object) -> Header:
    def change(header: pb.ReleaseHeader) -> None:
        target: object = header
        *parents, name = path.split(".")
        for p in parents:
            target = target[int(p)] if p.isdigit() else getattr(target, p)  # type: ignore[index]
        if isinstance(value, list):
            field = getattr(target, name)
            del field[:]
            field.extend(value)
        else:
            setattr(target, name, value)

    return change


HOSTILE_HEADERS: list[tuple[str, Header, str]] = [
    ("more groups than the bound", _many_groups(MAX_GROUPS + 1), f"more than {MAX_GROUPS} groups"),
    ("no priors id", _set("priors_id", ""), "priors_id"),
    ("a priors id that is no UUID", _set("priors_id", "../../etc/passwd"), "priors_id"),
    ("a prior on another support", _set("groups.0.prior", [0.5, 0.5]), "one prior mass"),
    ("no support bins", _set("groups.1.mechanism.support_bins", []), "one support bin"),
    ("a negative mass", _set("groups.0.prior", [1.2, -0.2, 0, 0, 0, 0]), "negative"),
    ("a NaN mass", _set("groups.0.prior", [float("nan"), 1, 0, 0, 0, 0]), "non-finite"),
    ("an infinite mass", _set("groups.0.prior", [float("inf"), 0, 0, 0, 0, 0]), "non-finite"),
    ("masses not summing to 1", _set("groups.0.prior", [0.5, 0.5, 0.5, 0, 0, 0]), "sum to 1"),
    ("a group at ε₂ of an example-level release", _set("groups.0.mechanism.epsilon", 0.95), "epsilon_total"),
    ("a group above the release's ε", _set("groups.0.mechanism.epsilon", 2.0), "epsilon_total"),
    ("another loss", _set("groups.0.mechanism.loss", "absolute"), "kind and loss"),
    ("another kind", _set("groups.0.mechanism.kind", "rr_top_k"), "kind and loss"),
    ("derived bin intervals", _set("groups.0.mechanism.bin_lower", [0.0, 3.0]), "bin intervals"),
    ("a user-level group", _set("groups.0.mechanism.privacy_unit", "user"), "privacy unit"),
    ("a group's bins out of order", _set("groups.0.mechanism.support_bins", [1, 1, 1, 0, 0, 0]), "group 0"),
    ("an encoding the codes do not need", _set("bin_encoding", pb.BIN_ENCODING_UINT16_LE), "bin encoding"),
]


@pytest.mark.parametrize(
    ("change", "needle"), [c[1:] for c in HOSTILE_HEADERS], ids=[c[0] for c in HOSTILE_HEADERS]
)
def test_hostile_group_headers_are_refused(h: Harness, change: Header, needle: str) -> None:
    header, chunks = split(build_frames(grouped(), h.sender))
    change(header)
    assert needle in refused(h, signed(header, chunks, h.sender))


def test_groups_times_support_is_bounded_before_any_group_is_read(h: Harness) -> None:
    """1,000 groups on a support of 263 points: 263,000 masses, over the bound, refused on the counts
    alone (the masses are not even distributions)."""
    k = MAX_GROUP_CELLS // 1000 + 1
    message = grouped()
    own = identity_bins(k)
    header, chunks = split(build_frames(ReleaseMessage(**{**message.__dict__, "mechanism": own}), h.sender))
    del header.groups[:]
    header.groups.add().prior.extend([0.0] * k)  # a bare prior: 1,000 of them stay under 8 MiB
    _many_groups(1000)(header)
    assert f"at most {MAX_GROUP_CELLS}" in refused(h, signed(header, chunks, h.sender))


def test_priors_id_without_groups_is_refused(h: Harness) -> None:
    header, chunks = split(build_frames(grouped_free(), h.sender))
    header.priors_id = str(uuid.uuid4())
    assert "no groups" in refused(h, signed(header, chunks, h.sender))


Chunk = Callable[[pb.Chunk], None]


def _group_codes(change: Callable[[np.ndarray], np.ndarray]) -> Chunk:
    def apply(chunk: pb.Chunk) -> None:
        codes = np.frombuffer(chunk.groups, dtype="<u2").astype(np.int64)
        chunk.groups = change(codes).astype("<u2").tobytes()

    return apply


def _bin_of_first_grouped(value: int) -> Chunk:
    def apply(chunk: pb.Chunk) -> None:
        bins = bytearray(chunk.bins)
        bins[1] = value  # example 1 is in group 0 (two bins)
        chunk.bins = bytes(bins)

    return apply


HOSTILE_CHUNKS: list[tuple[str, Chunk, str]] = [
    ("no groups", lambda c: setattr(c, "groups", b""), "two bytes of group per example"),
    ("a byte short", lambda c: setattr(c, "groups", c.groups[:-1]), "two bytes of group per example"),
    ("a group too many", lambda c: setattr(c, "groups", c.groups + b"\x00\x00"), "two bytes of group"),
    ("a group the header lacks", _group_codes(lambda g: np.where(g == 1, 2, g)), "names a group"),
    (
        "the largest code but one",
        _group_codes(lambda g: np.where(g == 1, NO_GROUP_CODE - 1, g)),
        "names a group",
    ),
    ("a grouped bin past its group's bins", _bin_of_first_grouped(2), "bin index out of range"),
    ("a grouped bin at a capped code", _bin_of_first_grouped(K), "bin index out of range"),
]


@pytest.mark.parametrize(
    ("change", "needle"), [c[1:] for c in HOSTILE_CHUNKS], ids=[c[0] for c in HOSTILE_CHUNKS]
)
def test_hostile_group_chunks_are_refused(h: Harness, change: Chunk, needle: str) -> None:
    header, chunks = split(build_frames(grouped(), h.sender))
    change(chunks[0])
    assert needle in refused(h, signed(header, chunks, h.sender))


def test_a_chunk_of_a_release_without_groups_carries_none(h: Harness) -> None:
    header, chunks = split(build_frames(grouped_free(), h.sender))
    chunks[0].groups = b"\x00\x00" * chunks[0].examples
    assert "groups the header does not have" in refused(h, signed(header, chunks, h.sender))
    # the honest chunk goes through: the same bin past group 0's two bins is the release's own
    header, chunks = split(build_frames(grouped_free(), h.sender))
    _bin_of_first_grouped(2)(chunks[0])
    assert h.stub.DeliverRelease(iter(signed(header, chunks, h.sender)), timeout=60).example_count == N


def test_a_user_level_grouped_release_is_stored_and_its_groups_must_state_its_user_fields(h: Harness) -> None:
    """The user-level seam: each group at the release's ε₂ with its τ, τ_p and ε₁; an example over the
    bound has no group and the capped code m. A group that states another τ, or the whole ε, is refused."""
    from labeldp.mechanisms import release_grouped_user_labels

    n = 3000
    support = integer_grid(0, K - 1)
    rng = np.random.default_rng(3)  # test data
    labels = rng.integers(0, K, n).astype(np.float64)
    groups = np.arange(n) % 3 - 1
    priors = np.array([[0.4, 0.3, 0.1, 0.1, 0.05, 0.05], [0.05, 0.05, 0.1, 0.1, 0.3, 0.4]])
    users, keys = np.arange(n) // 3, np.arange(n, dtype=np.int64) * 7919 + 11
    out = release_grouped_user_labels(labels, groups, priors, users, keys, support, 3.0, "squared", 2, salt=5)
    message = grouped_message([f"u{i:05d}" for i in range(n)], out)
    capped = out.bin_indices == out.fallback_mechanism.m
    assert capped.any() and np.all(out.groups[capped] == -1)
    frames = build_frames(message, h.sender)
    for change, needle in (
        (_set("groups.0.mechanism.contribution_bound", 3), "user-level fields"),
        (_set("groups.1.mechanism.epsilon", 3.0), "epsilon_randomize"),
    ):
        header, chunks = split(frames)
        change(header)
        assert needle in refused(h, signed(header, chunks, h.sender))
    assert h.stub.DeliverRelease(iter(frames), timeout=60).example_count == n
    stored = pq.read_table(h.stored_file(message.release_id))
    assert np.array_equal(stored.column("group").to_numpy(), out.groups)
    verified = check_header(frames[0], h.receiver.senders.pins, RECEIVER, 0)
    assert all(g.privacy_unit == "user" and g.contribution_bound == 2 for g in verified.groups)
    assert verified.groups == tuple(out.published_groups())
