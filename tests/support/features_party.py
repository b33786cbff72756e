"""Setting up a features party over its real interfaces: pin the test sender and deliver a release over
gRPC; upload a feature table as Parquet over REST."""

from __future__ import annotations

import io
from typing import Any

import grpc
import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.wire.sender import build_frames
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER


def pin_sender(c: httpx.Client, sender: Identity) -> None:
    c.post(
        "/v1/senders", json={"id": SENDER, "public_key_pem": public_key_pem(sender.public_key)}
    ).raise_for_status()


def deliver(c: httpx.Client, rel: Any, sender: Identity) -> None:
    """Stream a signed release to the party's gRPC receiver (plaintext, on loopback)."""
    with grpc.insecure_channel(f"127.0.0.1:{c.get('/v1/identity').json()['grpc_port']}") as ch:
        pb_grpc.FeaturesPartyStub(ch).DeliverRelease(iter(build_frames(rel, sender)))  # type: ignore[no-untyped-call]


def put_table(c: httpx.Client, name: str, table: pa.Table) -> httpx.Response:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return c.put(
        f"/v1/feature-tables/{name}",
        content=buf.getvalue(),
        headers={"Content-Type": "application/vnd.apache.parquet"},
    )
