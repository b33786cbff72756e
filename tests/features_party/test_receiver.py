"""The features party's gRPC receiver over real gRPC: it trusts nothing unsigned and stores nothing
partial."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pyarrow.parquet as pq
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from features_party.config import FeaturesSettings
from features_party.receiver.server import build_server
from features_party.receiver.service import Receiver
from features_party.storage.data_dir import DataDir
from features_party.storage.db import make_engine, migrate, session_factory
from features_party.storage.orm import Sender
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.wire.sender import build_frames
from labeldp.v1 import delivery_pb2 as pb
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER, release
from tests.support.receiver import Harness, start


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = start(tmp_path)
    yield harness
    harness.channel.close()
    harness.server.stop(None)


def code(call: object) -> grpc.StatusCode:
    assert callable(call)
    with pytest.raises(grpc.RpcError) as info:
        call()
    status: grpc.StatusCode = info.value.code()
    return status


def ids(n: int) -> list[str]:
    return [f"click-{i:08d}" for i in range(n)]


def test_delivery_is_verified_stored_and_idempotent(h: Harness) -> None:
    rel = release(ids(600_000), num_bins=5)
    frames = build_frames(rel, h.sender)
    receipt = h.stub.DeliverRelease(iter(frames))
    assert receipt.release_id == rel.release_id and receipt.example_count == 600_000
    assert receipt.receiver_id == "publisher"
    header = pb.ReleaseHeader.FromString(frames[0].header.header)
    assert receipt.payload_sha256 == header.payload_sha256
    stored = pq.read_table(h.stored_file(rel.release_id))
    assert stored.column("example_id").to_pylist() == ids(600_000)
    assert np.array_equal(np.asarray(stored.column("bin")), rel.bins)
    again = h.stub.DeliverRelease(iter(frames))
    assert again == receipt and h.stored() == 1 and h.no_leftovers()
    other = replace(rel, bins=(rel.bins + 1) % 5)  # same release id, other contents
    assert (
        code(lambda: h.stub.DeliverRelease(iter(build_frames(other, h.sender))))
        == grpc.StatusCode.ALREADY_EXISTS
    )
    assert h.stored() == 1


def test_rejections_store_nothing(h: Harness, tmp_path: Path) -> None:
    rel = release(ids(300_000))
    frames = build_frames(rel, h.sender)
    cases = {
        "unpinned key": (build_frames(rel, Identity.generate()), grpc.StatusCode.UNAUTHENTICATED),
        "wrong recipient": (
            build_frames(replace(rel, recipient_id="publisher-2"), h.sender),
            grpc.StatusCode.PERMISSION_DENIED,
        ),
        "expired": (
            build_frames(replace(rel, expires_at_unix_ms=1), h.sender),
            grpc.StatusCode.FAILED_PRECONDITION,
        ),
        "truncated": (frames[:-1], grpc.StatusCode.INVALID_ARGUMENT),
        "reordered": ([frames[0], frames[2], frames[1]], grpc.StatusCode.INVALID_ARGUMENT),
        "no header": (frames[1:], grpc.StatusCode.INVALID_ARGUMENT),
        "empty": ([], grpc.StatusCode.INVALID_ARGUMENT),
    }
    for name, (sent, expected) in cases.items():
        assert code(lambda sent=sent: h.stub.DeliverRelease(iter(sent))) == expected, name
        assert h.stored() == 0 and h.no_leftovers(), name
    rejected = {
        s.labels["outcome"]: s.value
        for family in h.metrics.received.collect()
        for s in family.samples
        if s.name.endswith("_total")
    }  # the /metrics counter, by the rejection's code
    assert rejected == {
        "unauthenticated": 1,
        "permission_denied": 1,
        "failed_precondition": 1,
        "invalid_argument": 4,
    }
    small = start(tmp_path, max_bytes=10_000)
    try:
        assert (
            code(lambda: small.stub.DeliverRelease(iter(build_frames(rel, small.sender))))
            == grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        assert small.stored() == 0 and small.no_leftovers()
    finally:
        small.server.stop(None)


def test_a_release_replayed_to_a_second_recipient_is_refused(h: Harness, tmp_path: Path) -> None:
    frames = build_frames(release(ids(1000)), h.sender)
    second = start(tmp_path, party="publisher-2")
    try:
        with second.receiver.sessions.begin() as s:  # the second recipient trusts the same sender
            s.merge(
                Sender(id=SENDER, key_id=h.sender.key_id, public_key_pem=public_key_pem(h.sender.public_key))
            )
        assert h.stub.DeliverRelease(iter(frames)).example_count == 1000
        assert code(lambda: second.stub.DeliverRelease(iter(frames))) == grpc.StatusCode.PERMISSION_DENIED
        assert second.stored() == 0
    finally:
        second.server.stop(None)


def test_1000_single_byte_changes_are_rejected_with_nothing_stored(h: Harness) -> None:
    frames = build_frames(release(ids(3000), num_bins=4), h.sender)
    blobs = [f.SerializeToString() for f in frames]
    cumulative = np.cumsum([len(b) for b in blobs])
    rng = np.random.default_rng(7)
    send = h.raw()
    for _ in range(1000):
        offset = int(rng.integers(0, cumulative[-1]))
        which = int(np.searchsorted(cumulative, offset, side="right"))
        pos = offset - (int(cumulative[which - 1]) if which else 0)
        mutated = bytearray(blobs[which])
        mutated[pos] ^= int(rng.integers(1, 256))
        sent = [*blobs[:which], bytes(mutated), *blobs[which + 1 :]]
        with pytest.raises(grpc.RpcError):
            send(iter(sent))
    assert h.stored() == 0 and h.no_leftovers()
    assert h.stub.DeliverRelease(iter(frames)).example_count == 3000  # the intact message still goes through


def test_streams_cut_at_random_points_leave_nothing_and_can_be_resent(h: Harness) -> None:
    frames = build_frames(release(ids(800_000), num_bins=3), h.sender)
    assert len(frames) >= 5
    rng = np.random.default_rng(11)

    class CutError(Exception):
        pass

    for _ in range(20):
        cut = int(rng.integers(0, len(frames)))

        def stream(cut: int = cut) -> Iterator[pb.ReleaseFrame]:
            yield from frames[:cut]
            time.sleep(float(rng.uniform(0, 0.05)))
            raise CutError  # the sender dies mid-stream

        with pytest.raises(grpc.RpcError):
            h.stub.DeliverRelease(stream())
        deadline = time.monotonic() + 10
        while not h.no_leftovers() and time.monotonic() < deadline:
            time.sleep(0.05)  # the server notices the cancelled call and cleans up
        assert h.stored() == 0 and h.no_leftovers()
    assert h.stub.DeliverRelease(iter(frames)).example_count == 800_000
    assert h.stored() == 1


def test_concurrent_deliveries_of_one_release_store_it_once(h: Harness) -> None:
    frames = build_frames(release(ids(200_000)), h.sender)
    receipts: list[pb.DeliveryReceipt] = []
    lock = threading.Lock()

    def go() -> None:
        r = h.stub.DeliverRelease(iter(frames))
        with lock:
            receipts.append(r)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(receipts) == 6 and len({r.SerializeToString() for r in receipts}) == 1
    assert h.stored() == 1


def test_mtls_health_and_reflection(tmp_path: Path) -> None:
    tls = start(tmp_path, tls=True)
    try:
        frames = build_frames(release(ids(5000)), tls.sender)
        assert tls.stub.DeliverRelease(iter(frames)).example_count == 5000
        health = health_pb2_grpc.HealthStub(tls.channel)
        status = health.Check(health_pb2.HealthCheckRequest(service="labeldp.v1.FeaturesParty"))
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        ca = (tmp_path / "certs" / "ca.pem").read_bytes()
        no_client_cert = grpc.secure_channel(
            f"localhost:{tls.port}", grpc.ssl_channel_credentials(root_certificates=ca)
        )
        unauthenticated_stub = pb_grpc.FeaturesPartyStub(no_client_cert)  # type: ignore[no-untyped-call]
        assert (
            code(lambda: unauthenticated_stub.DeliverRelease(iter(frames), timeout=10))
            == grpc.StatusCode.UNAVAILABLE
        )
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

        refl = reflection_pb2_grpc.ServerReflectionStub(tls.channel)
        answer = next(
            refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        )
        names = {s.name for s in answer.list_services_response.service}
        assert "labeldp.v1.FeaturesParty" in names and "grpc.health.v1.Health" in names
    finally:
        tls.server.stop(None)


def test_plaintext_must_be_explicit(tmp_path: Path) -> None:
    settings = FeaturesSettings(data_dir=tmp_path, grpc_port=0)
    engine = make_engine(settings.resolved_database_url())
    migrate(engine)
    receiver = Receiver(session_factory(engine), DataDir(tmp_path), "publisher", 1 << 20)
    with pytest.raises(ValueError, match="ALLOW_PLAINTEXT"):
        build_server(receiver, settings)


@pytest.mark.parametrize(
    "release_id",
    ["../../../tmp/x", "../releases/abc", "", "a" * 65, "5E0C1F2A-0000-4000-8000-000000000000", "x\x00y"],
)
def test_release_ids_that_are_not_uuids_are_refused_and_never_touch_the_disk(
    h: Harness, tmp_path: Path, release_id: str
) -> None:
    frames = build_frames(replace(release(ids(100)), release_id=release_id), h.sender)
    assert code(lambda: h.stub.DeliverRelease(iter(frames))) == grpc.StatusCode.INVALID_ARGUMENT
    assert h.stored() == 0 and h.no_leftovers()
    assert not (tmp_path / "x").exists() and not (h.settings.data_dir / "releases").exists()


def test_a_sender_cannot_touch_another_senders_release(h: Harness) -> None:
    victim = release(ids(1000))
    h.stub.DeliverRelease(iter(build_frames(victim, h.sender)))
    original = pq.read_table(h.stored_file(victim.release_id))
    intruder = Identity.generate()
    with h.receiver.sessions.begin() as s:  # a second sender, pinned like the first
        s.add(
            Sender(id="intruder", key_id=intruder.key_id, public_key_pem=public_key_pem(intruder.public_key))
        )
    forged = replace(release(ids(10)), release_id=victim.release_id, sender_id="intruder")
    assert (
        code(lambda: h.stub.DeliverRelease(iter(build_frames(forged, intruder))))
        == grpc.StatusCode.ALREADY_EXISTS
    )
    same_bytes = replace(victim, sender_id="intruder")  # even the same contents under its own name
    assert (
        code(lambda: h.stub.DeliverRelease(iter(build_frames(same_bytes, intruder))))
        == grpc.StatusCode.ALREADY_EXISTS
    )
    assert pq.read_table(h.stored_file(victim.release_id)).equals(original) and h.stored() == 1


def test_malformed_frames_are_invalid_argument_not_internal(h: Harness) -> None:
    send = h.raw()
    frames = [f.SerializeToString() for f in build_frames(release(ids(50)), h.sender)]
    for sent in ([b"\xff\xff\xff"], [frames[0], b"\x12\xff\xff\xff\xff"], [b"\x0a\x03abc"]):
        with pytest.raises(grpc.RpcError) as info:
            send(iter(sent))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, sent
    assert h.stored() == 0 and h.no_leftovers()


def test_stalled_streams_are_cut_and_do_not_block_deliveries(tmp_path: Path) -> None:
    """More stalled senders than the receiver has workers (a header, then nothing): each is cut after
    the idle deadline (DEADLINE_EXCEEDED), and a real delivery behind them still completes."""
    stalled_h = start(tmp_path, idle_s=1.0, workers=4)
    try:
        frames = build_frames(release(ids(2000)), stalled_h.sender)
        release_gate = threading.Event()

        def stalled() -> Iterator[pb.ReleaseFrame]:
            yield frames[0]
            release_gate.wait(30)  # never sends the chunks (until the test ends)

        outcomes: list[grpc.StatusCode] = []

        def stall() -> None:
            with pytest.raises(grpc.RpcError) as info:
                stalled_h.stub.DeliverRelease(stalled(), timeout=30)
            outcomes.append(info.value.code())

        threads = [threading.Thread(target=stall) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        started = time.monotonic()
        deadline = started + 20
        receipt = None
        while receipt is None and time.monotonic() < deadline:
            try:
                receipt = stalled_h.stub.DeliverRelease(iter(frames), timeout=10)
            except grpc.RpcError as exc:  # refused while every worker is taken: retry
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                time.sleep(0.2)
        assert receipt is not None and receipt.example_count == 2000
        assert time.monotonic() - started < 10
        # every stalled stream must end by itself (refused, or cut after the idle timeout) before the
        # test lets the senders go on: a stream released by the test would end early, which the
        # receiver rightly answers INVALID_ARGUMENT (seen once when a late-accepted stream was freed)
        patience = time.monotonic() + 20
        while len(outcomes) < 8 and time.monotonic() < patience:
            time.sleep(0.1)
        release_gate.set()
        for t in threads:
            t.join(timeout=30)
        assert len(outcomes) == 8 and set(outcomes) <= {
            grpc.StatusCode.DEADLINE_EXCEEDED,  # cut after the idle deadline
            grpc.StatusCode.RESOURCE_EXHAUSTED,  # over the tenant's streams at once
        }
        assert stalled_h.stored() == 1 and stalled_h.no_leftovers()
    finally:
        stalled_h.channel.close()
        stalled_h.server.stop(None)
