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
