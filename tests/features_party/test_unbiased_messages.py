"""The unbiased randomizer over real gRPC: the receiver rebuilds its exact integer rows from the
published integers and checks them (sizes bounded first, rows out of 2^53, ε-DP and unbiased), so a
pinned but hostile sender's tampered randomizer is refused, stores nothing and leaves nothing behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pyarrow.parquet as pq
import pytest

from features_party.receiver.store import published_mechanism
from features_party.storage.orm import ReceivedRelease
from labeldp.common.wire.sender import build_frames
from labeldp.mechanisms import PublishedMechanism, integer_grid
from labeldp.mechanisms.unbiased_program import optimize_unbiased
from labeldp.mechanisms.unbiased_weights import (
    MAX_UNBIASED_CELLS,
    MAX_UNBIASED_OUTPUTS,
    MAX_UNBIASED_SUPPORT,
    TOTAL,
)
from labeldp.v1 import delivery_pb2 as pb
from tests.support.messages import identity_bins, release
from tests.support.receiver import Harness, signed, split, start


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = start(tmp_path)
    yield harness
    harness.channel.close()
    harness.server.stop(None)


@pytest.fixture(scope="module")
def unbiased() -> PublishedMechanism:
    support = integer_grid(0, 8)
    prior = np.random.default_rng(4).dirichlet(np.ones(support.k))
    return optimize_unbiased(support, prior, 1.0).describe(prior=prior, epsilon_prior=0.1, epsilon_total=1.1)


def ids(n: int) -> list[str]:
    return [f"click-{i:08d}" for i in range(n)]


def honest(h: Harness, mechanism: PublishedMechanism) -> tuple[pb.ReleaseHeader, list[pb.Chunk]]:
    return split(build_frames(release(ids(200), mechanism=mechanism), h.sender))


def refused(h: Harness, header: pb.ReleaseHeader, chunks: list[pb.Chunk]) -> str:
    header.release_id = str(uuid.uuid4())
    with pytest.raises(grpc.RpcError) as info:
        h.stub.DeliverRelease(iter(signed(header, chunks, h.sender)), timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert h.stored() == 0 and h.no_leftovers()
    return str(info.value.details())


def test_an_unbiased_release_is_rebuilt_by_the_receiver(h: Harness, unbiased: PublishedMechanism) -> None:
    rel = release(ids(500), mechanism=unbiased)
    answer = h.stub.DeliverRelease(iter(build_frames(rel, h.sender)), timeout=60)
    assert answer.example_count == 500 and h.stored() == 1
    with h.receiver.sessions() as s:
        row = s.get(ReceivedRelease, rel.release_id)
    assert row is not None
    received = published_mechanism(row)
    assert received == unbiased
    np.testing.assert_array_equal(received.unbiased_weights().table, unbiased.unbiased_weights().table)
    stored = pq.read_table(h.stored_file(rel.release_id))
    assert sorted(stored.column(stored.column_names[-1]).to_pylist()) == sorted(rel.bins.tolist())


def test_tampered_integers_are_refused(h: Harness, unbiased: PublishedMechanism) -> None:
    header, chunks = honest(h, unbiased)
    m = header.mechanism

    def tampered(**fields: list[int]) -> pb.ReleaseHeader:
        bad = pb.ReleaseHeader.FromString(header.SerializeToString())
        for name, values in fields.items():
            bad.mechanism.ClearField(name)
            getattr(bad.mechanism, name).extend(values)
        return bad

    base, starts, offsets = list(m.base_weights), list(m.window_starts), list(m.window_offsets)
    i = int(np.argmax(offsets))  # a window well inside its output's capacity
    cases = {
        "summing to less than 2^53": tampered(base_weights=[*base[:-1], base[-1] + TOTAL]),
        "integers >= 1": tampered(base_weights=[0, *base[1:]]),
        "outside the outputs or their capacity": tampered(window_offsets=[*offsets[:-1], 2**64 - 1]),
        "does not fit": tampered(window_offsets=[*offsets[:-1], TOTAL - 1]),
        "a window starts outside": tampered(window_starts=[*starts[:-1], len(base)]),
        "biased": tampered(window_offsets=[o - (o // 2 if j == i else 0) for j, o in enumerate(offsets)]),
    }
    for needle, bad in cases.items():
        assert needle in refused(h, bad, chunks), needle
    understated = pb.ReleaseHeader.FromString(header.SerializeToString())
    understated.mechanism.implemented_epsilon = m.implemented_epsilon / 2  # claims less ε than spent
    assert "implemented_epsilon" in refused(h, understated, chunks)
    # the honest message still goes through
    assert h.stub.DeliverRelease(iter(signed(header, chunks, h.sender))).example_count == 200


def test_sizes_are_bounded_before_the_rows_are_rebuilt(h: Harness, unbiased: PublishedMechanism) -> None:
    header, chunks = honest(h, unbiased)
    wide = pb.ReleaseHeader.FromString(header.SerializeToString())
    wide.mechanism.bin_values.extend(np.linspace(100, 200, MAX_UNBIASED_OUTPUTS).tolist())
    assert str(MAX_UNBIASED_OUTPUTS) in refused(h, wide, chunks)
    k = MAX_UNBIASED_SUPPORT  # within each bound alone, too many cells together
    many = pb.ReleaseHeader.FromString(header.SerializeToString())
    many.prior.ClearField("support")
    many.prior.ClearField("masses")
    many.prior.support.extend(np.arange(k, dtype=float).tolist())
    many.prior.masses.extend([1 / k] * k)
    many.mechanism.ClearField("bin_values")
    many.mechanism.bin_values.extend(np.linspace(-5, k + 5, MAX_UNBIASED_CELLS // k + 1).tolist())
    assert str(MAX_UNBIASED_CELLS) in refused(h, many, chunks)
    # RR-on-Bins does not carry the unbiased randomizer's integers
    rr_header, rr_chunks = honest(h, identity_bins(3))
    rr_header.mechanism.base_weights.extend([1] * 3)
    assert "kind unbiased only" in refused(h, rr_header, rr_chunks)
