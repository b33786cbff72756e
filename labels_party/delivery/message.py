"""A release's signed message, built once when the release completes and stored as length-prefixed
serialized frames, so every (re-)delivery sends exactly the same bytes and spends nothing."""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from labeldp.common.identity import Identity
from labeldp.common.wire import Release, build_frames
from labeldp.v1 import delivery_pb2 as pb

_LEN = struct.Struct("<I")


@dataclass(frozen=True)
class Signer:
    identity: Identity
    party_id: str
    ttl_seconds: int


def message_path(data_dir: Path, release_id: str) -> Path:
    return data_dir / "messages" / f"{release_id}.frames"


def mechanism_proto(mechanism: dict[str, Any], loss: str) -> tuple[pb.Mechanism, pb.NoisyPrior]:
    edges = mechanism.get("bin_edges") or []
    proto = pb.Mechanism(
        kind=str(mechanism["kind"]),
        epsilon=float(mechanism["epsilon_randomize"]),
        implemented_epsilon=float(mechanism["implemented_epsilon"]),
        bin_values=[float(v) for v in mechanism["bin_values"]],
        loss=loss,
        bin_lower=[float(lo) for lo, _ in edges],
        bin_upper=[float(hi) for _, hi in edges],
    )
    prior = mechanism["prior"]
    support = mechanism.get("support") or list(range(len(prior)))
    return proto, pb.NoisyPrior(support=[float(v) for v in support], masses=[float(p) for p in prior])


def write_message(
    data_dir: Path,
    signer: Signer,
    *,
    release_id: str,
    recipient: str,
    label_type: str,
    epsilon_total: float,
    mechanism: dict[str, Any],
    loss: str,
    example_ids: pa.Array,
    bins: npt.NDArray[np.integer],
) -> Path:
    now = int(time.time() * 1000)
    proto_mechanism, prior = mechanism_proto(mechanism, loss)
    frames = build_frames(
        Release(
            release_id=release_id,
            sender_id=signer.party_id,
            recipient_id=recipient,
            created_at_unix_ms=now,
            expires_at_unix_ms=now + 1000 * signer.ttl_seconds,
            label_type=label_type,
            epsilon_total=epsilon_total,
            epsilon_prior=float(mechanism["epsilon_prior"]),
            epsilon_randomize=float(mechanism["epsilon_randomize"]),
            mechanism=proto_mechanism,
            prior=prior,
            example_ids=example_ids,
            bins=bins,
            num_bins=len(proto_mechanism.bin_values),
        ),
        signer.identity,
    )
    path = message_path(data_dir, release_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as fh:
        for frame in frames:
            data = frame.SerializeToString(deterministic=True)
            fh.write(_LEN.pack(len(data)))
            fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def read_frames(path: Path) -> Iterator[bytes]:
    """The stored frames, one serialized ``ReleaseFrame`` at a time (streamed, not loaded whole)."""
    with open(path, "rb") as fh:
        while prefix := fh.read(_LEN.size):
            (size,) = _LEN.unpack(prefix)
            yield fh.read(size)


def stored_header(path: Path) -> pb.ReleaseHeader:
    first = pb.ReleaseFrame.FromString(next(read_frames(path)))
    return pb.ReleaseHeader.FromString(first.header.header)
