"""The signed message: round trip, size on the wire, and rejection of every kind of tampering."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import fields
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from labeldp.common.identity import Identity
from labeldp.common.wire.format import WireError
from labeldp.common.wire.receiver import ChunkStream, check_header, decode_chunk
from labeldp.common.wire.records import read_records
from labeldp.common.wire.sender import MessageHeader, build_frames, store_message
from labeldp.v1 import delivery_pb2 as pb
from tests.support.messages import RECEIVER, SENDER, release


def pinned(identity: Identity) -> Callable[[str, str], Ed25519PublicKey | None]:
    return lambda sender, key_id: (
        identity.public_key if (sender, key_id) == (SENDER, identity.key_id) else None
    )


def receive(
    frames: list[pb.ReleaseFrame], identity: Identity, receiver: str = RECEIVER
) -> tuple[list[str], np.ndarray]:
    """The receiver's checks in order; returns the decoded release or raises."""
    header = check_header(frames[0], pinned(identity), receiver, int(time.time() * 1000)).header
    stream = ChunkStream(header, max_bytes=1 << 30)
    spooled = [stream.add(f) for f in frames[1:]]
    stream.finish()
    decoded = [decode_chunk(d, header) for d in spooled]
    assert all(groups is None for _, _, groups in decoded)  # a release without groups
    ids = [i for chunk_ids, _, _ in decoded for i in chunk_ids.to_pylist()]
    bins = np.concatenate([b for _, b, _ in decoded]) if decoded else np.zeros(0, np.int64)
    return ids, bins


def test_round_trip_over_several_chunks() -> None:
    me = Identity.generate()
    ids = [f"click-{i:09d}" for i in range(600_000)]
    rel = release(ids)
    frames = build_frames(rel, me)
    assert len(frames) >= 4  # header + 3 chunks of at most 262,144 examples
    got_ids, got_bins = receive(frames, me)
    assert got_ids == ids and np.array_equal(got_bins, rel.bins)
    assert all(f.ByteSize() < 8 * 2**20 for f in frames)


@pytest.mark.parametrize(
    "make_id", [lambda i: f"click-{i:09d}", lambda i: str(uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % 2**128))]
)
def test_wire_size_is_within_id_bytes_plus_1_05_per_example(make_id: Callable[[int], str]) -> None:
    n = 1_000_000
    ids = [make_id(i) for i in range(n)]
    frames = build_frames(release(ids, num_bins=200), Identity.generate())
    wire = sum(f.ByteSize() for f in frames)
    id_bytes = sum(len(i.encode()) for i in ids)
    assert wire <= id_bytes + 1.05 * n, (wire, id_bytes, (wire - id_bytes) / n)


def test_uint16_bins_when_there_are_more_than_256() -> None:
    me = Identity.generate()
    rel = release([f"e{i}" for i in range(5000)], num_bins=1000)
    frames = build_frames(rel, me)
    header = pb.ReleaseHeader.FromString(frames[0].header.header)
    assert header.bin_encoding == pb.BIN_ENCODING_UINT16_LE
    assert np.array_equal(receive(frames, me)[1], rel.bins)


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(WireError) as info:
        call()
    return info.value.code


def test_every_rejection_has_its_status() -> None:
    me, stranger = Identity.generate(), Identity.generate()
    ids = [f"e{i}" for i in range(300_000)]
    frames = build_frames(release(ids), me)
    assert code_of(lambda: receive(build_frames(release(ids), stranger), me)) == "unauthenticated"
    assert code_of(lambda: receive(frames, me, receiver="someone-else")) == "permission_denied"
    assert code_of(lambda: receive(build_frames(release(ids, ttl_s=-1), me), me)) == "failed_precondition"
    assert code_of(lambda: receive(frames[:-1], me)) == "invalid_argument"  # truncated
    assert code_of(lambda: receive([frames[0], frames[2], frames[1]], me)) == "invalid_argument"  # reordered
    assert (
        code_of(lambda: receive([frames[0], frames[1], frames[1]], me)) == "invalid_argument"
    )  # replayed chunk
    assert code_of(lambda: receive(frames[1:], me)) == "invalid_argument"  # no header first
    assert code_of(lambda: receive([frames[0], frames[0]], me)) == "invalid_argument"
    header = check_header(frames[0], pinned(me), RECEIVER, int(time.time() * 1000)).header
    tight = ChunkStream(header, max_bytes=1000)
    assert code_of(lambda: tight.add(frames[1])) == "resource_exhausted"


def test_single_byte_changes_are_always_rejected() -> None:
    """Flip one byte at 1,200 random positions of a real release's frames; none may verify."""
    me = Identity.generate()
    ids = [f"click-{i:07d}" for i in range(20_000)]
    frames = build_frames(release(ids, num_bins=4), me)
    blobs = [f.SerializeToString() for f in frames]
    sizes = np.array([len(b) for b in blobs])
    rng = np.random.default_rng(42)
    rejected = 0
    trials = 1200
    for _ in range(trials):
        offset = int(rng.integers(0, sizes.sum()))
        which = int(np.searchsorted(np.cumsum(sizes), offset, side="right"))
        pos = offset - int(np.cumsum(sizes)[which - 1] if which else 0)
        mutated = bytearray(blobs[which])
        mutated[pos] ^= int(rng.integers(1, 256))
        try:
            frame = pb.ReleaseFrame.FromString(bytes(mutated))
            candidate = [*frames[:which], frame, *frames[which + 1 :]]
            receive(candidate, me)
        except Exception:  # a parse error or a WireError: either way nothing verifies
            rejected += 1
    assert rejected == trials


def test_a_user_level_message_carries_the_capped_code_and_its_accounting() -> None:
    """Over-cap examples travel with the code m (one past the last bin; a 256-bin user-level release
    needs uint16 for it); the header states τ, τ_p, ε_τ and ε per example, and the receiver gets the
    same published mechanism back. An example-level message may not use the code m."""
    from dataclasses import replace

    from labeldp.mechanisms import PublishedMechanism
    from tests.support.messages import identity_bins

    example_level = identity_bins(256)  # ε₁ = 0.05, ε₂ = 0.95
    published = PublishedMechanism.model_validate(
        {
            **example_level.model_dump(),
            "epsilon": 1.95,  # ε₁ + τ·ε₂
            "privacy_unit": "user",
            "contribution_bound": 2,
            "prior_contribution_bound": 2,
            "epsilon_example": 0.975,  # ε₁/τ_p + ε₂
        }
    )
    base = release([f"u{i}" for i in range(1200)], mechanism=published)
    codes = np.asarray(base.bins).copy()
    codes[::3] = 256  # every third example over the bound
    rel = replace(base, bins=codes)
    me = Identity.generate()
    frames = build_frames(rel, me)
    header = pb.ReleaseHeader.FromString(frames[0].header.header)
    assert header.bin_encoding == pb.BIN_ENCODING_UINT16_LE  # 257 codes
    assert header.mechanism.contribution_bound == 2 and header.mechanism.prior_contribution_bound == 2
    assert header.mechanism.epsilon_example == published.epsilon_example
    _, bins = receive(frames, me)
    assert np.array_equal(bins, codes) and int((bins == 256).sum()) == 400
    verified = check_header(frames[0], pinned(me), RECEIVER, int(time.time() * 1000))
    assert verified.mechanism == published
    # the same code in an example-level message is out of range
    plain = release([f"e{i}" for i in range(10)], num_bins=3)
    frames = build_frames(replace(plain, bins=np.full(10, 3)), me)
    assert code_of(lambda: receive(frames, me)) == "invalid_argument"


def test_a_message_streamed_from_pieces_is_the_message_built_in_memory(tmp_path: Path) -> None:
    """``store_message`` (what a release on a cluster uses, one output partition at a time) stores a
    message the receiver verifies and reassembles in order: with pieces cut at chunk boundaries it has
    the in-memory message's chunks; with uneven pieces, chunks never span two pieces."""
    me = Identity.generate()
    ids = [f"click-{i:09d}" for i in range(600_000)]
    rel = release(ids)
    header = MessageHeader(**{f.name: getattr(rel, f.name) for f in fields(MessageHeader)})
    in_memory = build_frames(rel, me)
    cut = in_memory[1].chunk.examples
    for name, bounds in (("aligned", (0, cut, 600_000)), ("uneven", (0, 1000, 300_000, 600_000))):
        spans = list(pairwise(bounds))
        pieces = [(pa.array(ids[a:b]), rel.bins[a:b]) for a, b in spans]
        store_message(tmp_path / f"{name}.frames", header, iter(pieces), me)
        frames = [pb.ReleaseFrame.FromString(r) for r in read_records(tmp_path / f"{name}.frames")]
        got_ids, got_bins = receive(frames, me)
        assert got_ids == ids and np.array_equal(got_bins, rel.bins)
        per_piece = [len(build_frames(release(ids[a:b]), me)) - 1 for a, b in spans]
        assert len(frames) == 1 + sum(per_piece)
        if name == "aligned":
            assert [f.chunk.examples for f in frames] == [f.chunk.examples for f in in_memory]
    assert not list(tmp_path.glob(".*"))  # no spool or temporary file left


def test_a_streamed_message_with_a_bad_piece_leaves_nothing(tmp_path: Path) -> None:
    rel = release(["a", "b", "c"])
    header = MessageHeader(**{f.name: getattr(rel, f.name) for f in fields(MessageHeader)})
    with pytest.raises(ValueError, match="same length"):
        store_message(
            tmp_path / "bad.frames", header, iter([(pa.array(["a", "b"]), rel.bins)]), Identity.generate()
        )
    assert list(tmp_path.iterdir()) == []


def test_the_signature_picks_among_several_pins_and_names_their_owners() -> None:
    """Pins of one sender id by several tenants: the header verifies under the pins whose key signed
    it, and the receiver learns their owners; under none, it is refused."""
    from labeldp.common.model_message import Pin

    me, other = Identity.generate(), Identity.generate()
    frames = build_frames(release([f"e{i}" for i in range(10)]), me)
    pins = [Pin(other.public_key, "tenant-b"), Pin(me.public_key, "tenant-a")]
    now = int(time.time() * 1000)
    assert check_header(frames[0], lambda s, k: pins, RECEIVER, now).owners == ("tenant-a",)
    both = [*pins, Pin(me.public_key, "tenant-c")]
    assert check_header(frames[0], lambda s, k: both, RECEIVER, now).owners == ("tenant-a", "tenant-c")
    assert check_header(frames[0], pinned(me), RECEIVER, now).owners == (None,)
    assert code_of(lambda: check_header(frames[0], lambda s, k: pins[:1], RECEIVER, now)) == "unauthenticated"
    assert code_of(lambda: check_header(frames[0], lambda s, k: [], RECEIVER, now)) == "unauthenticated"


def test_the_largest_honest_chunks_decode_within_the_bound() -> None:
    """IDs of the largest allowed size fill chunks to ``CHUNK_MAX_ID_BYTES``; short IDs fill them to
    ``CHUNK_MAX_EXAMPLES``: both decode, and a chunk stating more than its examples can take does not."""
    from labeldp.common.wire.arrow_ids import id_bytes_bound
    from labeldp.common.wire.format import CHUNK_MAX_EXAMPLES, CHUNK_MAX_ID_BYTES
    from labeldp.common.wire.sender import encode_ids

    me = Identity.generate()
    longest = [f"{i:08d}".ljust(256, "x") for i in range(20_000)]
    frames = build_frames(release(longest), me)
    assert max(len(f.chunk.example_ids) for f in frames[1:]) > 0
    assert receive(frames, me)[0] == longest
    assert sum(f.chunk.examples for f in frames[1:2]) * 256 == CHUNK_MAX_ID_BYTES
    shortest = [f"{i:x}" for i in range(CHUNK_MAX_EXAMPLES + 5)]
    assert receive(build_frames(release(shortest), me), me)[0] == shortest
    assert id_bytes_bound(CHUNK_MAX_EXAMPLES) < 4 * 2**20
    header = pb.ReleaseHeader.FromString(frames[0].header.header)
    wide = encode_ids(pa.array(["y" * 2000, "z" * 2000]))  # 4,000 bytes where 2 IDs take at most 512
    chunk = pb.Chunk(index=0, examples=2, example_ids=wide, bins=b"\x00\x00")
    assert code_of(lambda: decode_chunk(chunk.SerializeToString(), header)) == "resource_exhausted"
    more = pb.Chunk(index=0, examples=2, example_ids=frames[1].chunk.example_ids, bins=b"\x00\x00")
    assert code_of(lambda: decode_chunk(more.SerializeToString(), header)) == "invalid_argument"


def test_malformed_id_streams_from_a_pinned_sender_only_ever_raise_wire_errors() -> None:
    """A pinned sender signs whatever it likes: 3,000 chunks with bytes of their ID stream (metadata
    and body, compressed or not, with nulls) changed are refused with a status or decode to IDs that
    follow the rules — never another exception, never a crash of the receiving process."""
    me = Identity.generate()
    frames = build_frames(release([f"e{i}" for i in range(300)]), me)
    header = pb.ReleaseHeader.FromString(frames[0].header.header)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([("example_id", pa.string())])) as writer:  # uncompressed
        writer.write_batch(pa.record_batch([pa.array([f"e{i}" for i in range(300)])], names=["example_id"]))
    nulls = pa.array([None if i % 7 == 0 else f"e{i}" for i in range(300)])
    from labeldp.common.wire.sender import encode_ids

    sources = [frames[1].chunk.example_ids, sink.getvalue().to_pybytes(), encode_ids(nulls)]
    rng = np.random.default_rng(3)
    outcomes: dict[str, int] = {}
    for trial in range(3000):
        mutated = bytearray(sources[trial % 3])
        reach = 400 if trial % 2 else len(mutated)  # the metadata, or anywhere
        for _ in range(int(rng.integers(1, 6))):
            mutated[int(rng.integers(0, min(reach, len(mutated))))] = int(rng.integers(0, 256))
        chunk = pb.Chunk(index=0, examples=300, example_ids=bytes(mutated), bins=bytes(300))
        try:
            ids, _, _ = decode_chunk(chunk.SerializeToString(), header)
            assert len(ids) == 300 and ids.null_count == 0
            outcome = "decoded"
        except WireError as exc:
            outcome = exc.code
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("invalid_argument", 0) > 2000 and set(outcomes) <= {
        "decoded",
        "invalid_argument",
        "resource_exhausted",
    }
