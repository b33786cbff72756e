"""Hostile messages from a pinned sender, over real gRPC: everything the signature covers is bounded
before it costs anything — a chunk's example IDs before they are decompressed, the published
mechanism's sizes before its bins are derived, the announced counts before any chunk is read — and
the decoded IDs follow the upload rules across the whole message; model messages are checked field
by field. Each refusal stores nothing and leaves nothing on disk."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from features_party.receiver import unique_ids
from labeldp.common.model_message import Column, sign_model
from labeldp.common.wire.arrow_ids import id_bytes_bound
from labeldp.common.wire.format import CHUNK_MAX_EXAMPLES
from labeldp.common.wire.receiver import OLD_SENDER_MAX_PAIRS
from labeldp.common.wire.sender import build_frames
from labeldp.v1 import delivery_pb2 as pb
from tests.support.features_party import peak_rss_growth
from tests.support.messages import release
from tests.support.receiver import Harness, encode_ids, model_payload, signed, split, start

PEAK_MIB = 32  # what refusing a bomb may raise the receiver's peak memory by


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = start(tmp_path)
    yield harness
    harness.channel.close()
    harness.server.stop(None)


def refused(h: Harness, frames: list[pb.ReleaseFrame]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        h.stub.DeliverRelease(iter(frames), timeout=60)
    assert h.stored() == 0 and h.no_leftovers()
    return info.value.code(), info.value.details()


def ids(n: int, prefix: str = "click") -> list[str]:
    return [f"{prefix}-{i:08d}" for i in range(n)]


def with_ids(h: Harness, chunk_ids: list[pa.Array]) -> list[pb.ReleaseFrame]:
    """A signed message whose chunks carry exactly these ID arrays (and valid bins)."""
    header, _ = split(build_frames(release(["x"]), h.sender))
    chunks = [
        pb.Chunk(index=i, examples=len(a), example_ids=encode_ids(a), bins=bytes(len(a)))
        for i, a in enumerate(chunk_ids)
    ]
    return signed(header, chunks, h.sender)


def test_a_compressed_chunk_bomb_is_refused_before_it_is_decompressed(h: Harness) -> None:
    """256 IDs of 1 MiB each: 256 MiB of IDs in about 25 KB of zstd. The chunk's buffers state their
    decompressed sizes; 256 examples may take at most ``id_bytes_bound(256)`` (about 66 KB)."""
    bomb = encode_ids(pa.array(["a" * 2**20] * 256))
    assert len(bomb) < 100_000
    frames = with_ids(h, [pa.array(["x"] * 256)])
    header, chunks = split(frames)
    chunks[0].example_ids = bomb
    with peak_rss_growth() as peak:
        status, detail = refused(h, signed(header, chunks, h.sender))
    assert status == grpc.StatusCode.RESOURCE_EXHAUSTED and "decompress" in detail, detail
    assert str(id_bytes_bound(256)) in detail
    assert peak.mib < PEAK_MIB, peak
    # the same chunk's honest IDs go through
    assert h.stub.DeliverRelease(iter(with_ids(h, [pa.array(ids(256))]))).example_count == 256


def test_a_buffer_that_decompresses_past_its_stated_size_is_refused(h: Harness) -> None:
    honest = pa.array(ids(1000))
    encoded = encode_ids(honest)
    data_size = honest.buffers()[2].size.to_bytes(8, "little", signed=True)
    assert encoded.count(data_size) == 1
    lying = encoded.replace(data_size, (100).to_bytes(8, "little", signed=True))
    header, chunks = split(with_ids(h, [honest]))
    chunks[0].example_ids = lying
    status, _ = refused(h, signed(header, chunks, h.sender))
    assert status == grpc.StatusCode.INVALID_ARGUMENT


def test_counts_an_honest_sender_cannot_announce_are_refused_before_any_chunk(
    h: Harness, tmp_path: Path
) -> None:
    header, chunks = split(build_frames(release(ids(1000)), h.sender))
    cases = {
        "more examples than the chunks can hold": (CHUNK_MAX_EXAMPLES + 1, 1),
        "more chunks than examples": (1, 2),
        "examples in no chunk": (5, 0),
    }
    for name, (examples, count) in cases.items():
        changed = pb.ReleaseHeader.FromString(header.SerializeToString())
        changed.example_count, changed.chunk_count = examples, count
        status, detail = refused(h, signed(changed, chunks, h.sender, keep_counts=True))
        assert status == grpc.StatusCode.INVALID_ARGUMENT and "chunks" in detail, name
    empty = pb.Chunk(index=0, examples=0, example_ids=encode_ids(pa.array([], pa.string())), bins=b"")
    status, _ = refused(h, signed(header, [empty], h.sender))
    assert status == grpc.StatusCode.INVALID_ARGUMENT
    small = start(tmp_path, max_bytes=100_000)
    try:
        frames = build_frames(release(ids(1000)), small.sender)
        head, body = split(frames)
        head.example_count, head.chunk_count = 200_000, 1  # more examples than bytes allowed
        with pytest.raises(grpc.RpcError) as info:
            small.stub.DeliverRelease(iter(signed(head, body, small.sender, keep_counts=True)))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert small.stored() == 0 and small.no_leftovers()
    finally:
        small.server.stop(None)


def test_a_header_without_support_bins_is_bounded_before_bins_are_derived(h: Harness) -> None:
    """Old senders state no ``support_bins``: deriving them compares every support point with every
    bin. 400,000 points × 20,000 bins (8·10⁹ comparisons, about 40 minutes) is refused at once; an
    honest old sender's small mechanism still goes through."""
    rel = release(ids(100), num_bins=3)
    header, chunks = split(build_frames(rel, h.sender))
    old = pb.ReleaseHeader.FromString(header.SerializeToString())
    old.mechanism.ClearField("support_bins")
    assert h.stub.DeliverRelease(iter(signed(old, chunks, h.sender))).example_count == 100
    hostile = pb.ReleaseHeader.FromString(old.SerializeToString())
    hostile.release_id = str(uuid.uuid4())
    k, m = 400_000, 20_000
    hostile.prior.ClearField("support")
    hostile.prior.ClearField("masses")
    hostile.prior.support.extend(np.arange(k, dtype=float).tolist())
    hostile.prior.masses.extend([1 / k] * k)
    for name in ("bin_lower", "bin_upper", "bin_values"):
        hostile.mechanism.ClearField(name)
    hostile.mechanism.bin_lower.extend([float(k)] * m)  # no support point in any bin: all scanned
    hostile.mechanism.bin_upper.extend([float(k)] * m)
    hostile.mechanism.bin_values.extend([0.0] * m)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        h.stub.DeliverRelease(iter(signed(hostile, chunks, h.sender)), timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(OLD_SENDER_MAX_PAIRS) in info.value.details() and time.monotonic() - started < 5
    assert h.stored() == 1 and h.no_leftovers()


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (pa.array([b"ok", b"\xff\xfe"], pa.binary()).cast(pa.string(), safe=False), "UTF-8"),
        (pa.array(["ok", "a\x00b"]), "control"),
        (pa.array(["ok", "a\nb"]), "control"),
        (pa.array(["ok", "tab\there"]), "control"),
        (pa.array(["ok", "x" * 300]), "256 bytes"),
        (pa.array(["ok", ""]), "empty"),
        (pa.array(["ok", "   "]), "empty"),
        (pa.array(["ok", None], pa.string()), "empty"),
    ],
)
def test_example_ids_follow_the_upload_rules(h: Harness, bad: pa.Array, needle: str) -> None:
    good = pa.array(ids(5000))
    status, detail = refused(h, with_ids(h, [good, pa.concat_arrays([pa.array(ids(10, "z")), bad])]))
    assert status == grpc.StatusCode.INVALID_ARGUMENT and needle in detail, detail
    assert "chunk 1" in detail, detail
    if needle != "UTF-8":  # the rules name the example's place in the message
        assert "example 5012 of the message" in detail, detail


def test_an_oversized_id_is_refused_by_the_chunk_bound(h: Harness) -> None:
    """A 100 KB ID among 10 examples states more bytes than 10 IDs of at most 256 bytes can take."""
    status, detail = refused(h, with_ids(h, [pa.array([*ids(9), "x" * 100_000])]))
    assert status == grpc.StatusCode.RESOURCE_EXHAUSTED and "decompress" in detail


@pytest.mark.parametrize("in_memory_up_to", [unique_ids.IN_MEMORY_UP_TO, 1000])
def test_duplicate_ids_anywhere_in_a_message_are_refused(
    h: Harness, monkeypatch: pytest.MonkeyPatch, in_memory_up_to: int
) -> None:
    """Within a chunk, and in chunks far apart; with the keys in memory and spilled to disk (an unlinked
    file in the spool folder: nothing left behind)."""
    monkeypatch.setattr(unique_ids, "IN_MEMORY_UP_TO", in_memory_up_to)
    many = ids(600_000)
    for listed in ([*many[:10], many[3]], [*many, many[0]], [many[-1], *many]):
        frames = build_frames(release(listed), h.sender)
        status, detail = refused(h, frames)
        assert status == grpc.StatusCode.INVALID_ARGUMENT and "1 example IDs more than once" in detail
    rel = release(many)
    assert h.stub.DeliverRelease(iter(build_frames(rel, h.sender))).example_count == 600_000
    assert pq.read_table(h.stored_file(rel.release_id)).column("example_id").to_pylist() == many
    assert h.no_leftovers()


def envelope_of(body: bytes, sender_id: str, key_id: str, signature: bytes) -> bytes:
    return json.dumps(
        {
            "format": "labeldp.semi-sensitive-model/1",
            "sender_id": sender_id,
            "sender_key_id": key_id,
            "payload": base64.b64encode(body).decode(),
            "signature": base64.b64encode(signature).decode(),
        }
    ).encode()


def test_model_messages_are_checked_against_public_bounds(h: Harness) -> None:
    good = model_payload(h.sender)
    assert h.deliver_model(sign_model(good, h.sender)) == grpc.StatusCode.OK and h.models_stored() == 1
    w = good.weights

    def weights(**changed: object) -> dict[str, object]:
        return {**w, **changed}

    g = good.guarantee
    bad: dict[str, dict[str, Any]] = {
        "a NaN weight": {"weights": weights(**{"head.2.bias": [float("nan")]})},
        "an infinite weight": {"weights": weights(**{"head.0.bias": [float("inf"), 0.0, 0.0]})},
        "a weight beyond float32": {"weights": weights(**{"head.0.bias": [1e300, 0.0, 0.0]})},
        "a width of 10⁹": {"architecture": {"width": 10**9}},
        "another architecture key": {"architecture": {"width": 3, "depth": 9}},
        "a weight of the wrong shape": {"weights": weights(**{"head.0.weight": [[0.0] * 6] * 2})},
        "a ragged weight": {"weights": weights(**{"head.2.weight": [[0.0, 0.0]]})},
        "text for a weight": {"weights": weights(**{"head.2.bias": ["1.0"]})},
        "a boolean for a weight": {"weights": weights(**{"head.2.bias": [True]})},
        "a weight too many": {"weights": weights(extra=[0.0])},
        "a weight missing": {"weights": {k: v for k, v in w.items() if k != "head.2.bias"}},
        "no semi-sensitive column": {"semi_sensitive": []},
        "65 columns": {"non_sensitive": [Column(name=f"c{i}", kind="number", lo=0, hi=1) for i in range(65)]},
        "a column declared twice": {
            "semi_sensitive": [Column(name="hour", kind="category", categories=["a", "b"])]
        },
        "a column that is a path": {"non_sensitive": [Column(name="../x", kind="number", lo=0, hi=1)]},
        "unbounded numbers": {"non_sensitive": [Column(name="hour", kind="number", lo=0, hi=float("inf"))]},
        "2,000 categories": {
            "semi_sensitive": [
                Column(name="device", kind="category", categories=[str(i) for i in range(2000)])
            ]
        },
        "δ of 2": {"guarantee": g.model_copy(update={"delta": 2.0})},
        "ε of NaN": {"guarantee": g.model_copy(update={"epsilon_dpsgd": float("nan")})},
        "ε total below its parts": {"guarantee": g.model_copy(update={"epsilon_total": 1.0})},
        "no steps": {"guarantee": g.model_copy(update={"steps": 0})},
        "a label release that is not a UUID": {
            "guarantee": g.model_copy(update={"label_release_id": "../x"})
        },
        "no label release but an ε₁": {"guarantee": g.model_copy(update={"label_release_id": None})},
        "a label release without its ε₁": {"guarantee": g.model_copy(update={"epsilon_labels": 0.0})},
        "a user-level term on an example-level model": {
            "guarantee": g.model_copy(update={"epsilon_user": 9.0})
        },
        "expiry before creation": {"created_at_unix_ms": good.expires_at_unix_ms + 1},
        "a control character in the dataset id": {"dataset_id": "a\nb"},
    }
    for name, change in bad.items():
        payload = good.model_copy(update={"model_id": str(uuid.uuid4()), **change})
        assert h.deliver_model(sign_model(payload, h.sender)) == grpc.StatusCode.INVALID_ARGUMENT, name
    # a NaN written as the JSON literal itself
    body = json.dumps({**good.model_dump(mode="json"), "model_id": str(uuid.uuid4())}).replace(
        '"head.2.bias": [0.1]', '"head.2.bias": [NaN]'
    )
    assert "NaN" in body
    raw = body.encode()
    envelope = envelope_of(raw, good.sender_id, h.sender.key_id, h.sender.sign(raw))
    assert h.deliver_model(envelope) == grpc.StatusCode.INVALID_ARGUMENT
    assert h.models_stored() == 1 and h.no_leftovers()
