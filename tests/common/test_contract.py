"""The committed gRPC stubs match the .proto sources, and the contract keeps its field numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from labeldp.v1 import delivery_pb2

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"


def test_generated_stubs_match_the_proto_files(tmp_path: Path) -> None:
    sources = sorted(PROTO.glob("labeldp/v1/*.proto"))
    assert sources
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            *map(str, sources),
        ],
        check=True,
    )
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "protoc produced nothing"
    for rel in generated:
        committed = ROOT / rel
        assert committed.exists(), f"{rel} is not committed: run `make proto`"
        assert committed.read_bytes() == (tmp_path / rel).read_bytes(), f"{rel} drifted: run `make proto`"


def test_field_numbers_are_stable() -> None:
    """Fields are added, never renumbered: pin the numbers receivers in the field depend on."""
    header = delivery_pb2.ReleaseHeader.DESCRIPTOR.fields_by_name
    pinned = {
        "format_version": 1,
        "release_id": 2,
        "sender_id": 3,
        "sender_key_id": 4,
        "recipient_id": 5,
        "created_at_unix_ms": 6,
        "expires_at_unix_ms": 7,
        "example_count": 14,
        "chunk_count": 15,
        "payload_sha256": 16,
        "bin_encoding": 17,
    }
    assert {name: header[name].number for name in pinned} == pinned
    frame = delivery_pb2.ReleaseFrame.DESCRIPTOR.fields_by_name
    assert (frame["header"].number, frame["chunk"].number) == (1, 2)
    chunk = delivery_pb2.Chunk.DESCRIPTOR.fields_by_name
    assert [chunk[n].number for n in ("index", "examples", "example_ids", "bins")] == [1, 2, 3, 4]
    mechanism = delivery_pb2.Mechanism.DESCRIPTOR.fields_by_name
    user_level = ("privacy_unit", "contribution_bound", "prior_contribution_bound", "epsilon_bound")
    assert [mechanism[n].number for n in (*user_level, "epsilon_example")] == [9, 10, 11, 12, 13]
    assert mechanism["support_bins"].number == 8


def test_priors_field_numbers_are_stable() -> None:
    """The priors exchange (priors.proto) is pinned the same way: both heads' addressing and digests, the
    chunks' layout, and the RPC on the one service."""
    from labeldp.v1 import priors_pb2

    request = priors_pb2.PricingRequest.DESCRIPTOR.fields_by_name
    pinned_request = {
        "format_version": 1,
        "request_id": 2,
        "sender_id": 3,
        "sender_key_id": 4,
        "recipient_id": 5,
        "recipient_tenant": 6,
        "expires_at_unix_ms": 8,
        "support": 11,
        "max_groups": 12,
        "example_count": 13,
        "chunk_count": 14,
        "ids_sha256": 15,
    }
    assert {name: request[name].number for name in pinned_request} == pinned_request
    header = priors_pb2.PriorsHeader.DESCRIPTOR.fields_by_name
    pinned_header = {
        "format_version": 1,
        "priors_id": 2,
        "request_id": 3,
        "sender_public_key": 6,
        "recipient_id": 7,
        "recipient_tenant": 8,
        "expires_at_unix_ms": 10,
        "support": 13,
        "groups": 14,
        "example_count": 15,
        "chunk_count": 16,
        "payload_sha256": 17,
    }
    assert {name: header[name].number for name in pinned_header} == pinned_header
    for frame in (priors_pb2.PricingFrame, priors_pb2.PriorsFrame):
        assert [f.number for f in frame.DESCRIPTOR.fields] == [1, 2]
    for chunk in (priors_pb2.PricingChunk, priors_pb2.GroupChunk):
        assert [f.number for f in chunk.DESCRIPTOR.fields] == [1, 2, 3]
    service = delivery_pb2.DESCRIPTOR.services_by_name["FeaturesParty"]
    method = service.methods_by_name["PriceExamples"]
    assert method.client_streaming and method.server_streaming
    assert method.input_type.name == "PricingFrame" and method.output_type.name == "PriorsFrame"
