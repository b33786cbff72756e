"""The receiver harness (a real gRPC server on loopback with a pinned sender), and hostile messages:
a release's frames re-signed after any change, and small valid model messages to break."""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
import pyarrow as pa
from sqlalchemy import func, select

from features_party import tenants
from features_party.config import FeaturesSettings
from features_party.metrics import FeaturesMetrics
from features_party.receiver.server import ReceiverServer, build_server
from features_party.receiver.service import Receiver
from features_party.storage.data_dir import DataDir
from features_party.storage.db import make_engine, migrate, session_factory
from features_party.storage.orm import ReceivedModel, ReceivedRelease, Sender
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.model_message import Column, Guarantee, ModelPayload, weight_shapes
from labeldp.common.tls import dev_ca
from labeldp.common.wire.format import ID_SCHEMA, MAX_MESSAGE_BYTES
from labeldp.v1 import delivery_pb2 as pb
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import RECEIVER, SENDER

OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES + 2**20)]


@dataclass
class Harness:
    settings: FeaturesSettings
    sender: Identity
    channel: grpc.Channel
    server: ReceiverServer
    receiver: Receiver
    port: int
    metrics: FeaturesMetrics
    tenant_id: str  # the tenant whose pin of SENDER (the sender's key) delivers here

    @property
    def stub(self) -> pb_grpc.FeaturesPartyStub:
        return pb_grpc.FeaturesPartyStub(self.channel)  # type: ignore[no-untyped-call]

    def raw(self) -> grpc.StreamUnaryMultiCallable:
        """Send frames as raw bytes (so tampered bytes reach the server unparsed)."""
        return self.channel.stream_unary(
            "/labeldp.v1.FeaturesParty/DeliverRelease", response_deserializer=pb.DeliveryReceipt.FromString
        )

    def channel_as(self, client: str) -> grpc.Channel:
        """A new mTLS channel with the client certificate ``client`` of the harness's CA (``labels-party``,
        ``mallory``): what the receiver tells peers apart by."""
        certs = self.settings.data_dir.parent / "certs"
        credentials = grpc.ssl_channel_credentials(
            root_certificates=(certs / "ca.pem").read_bytes(),
            private_key=(certs / f"{client}-key.pem").read_bytes(),
            certificate_chain=(certs / f"{client}.pem").read_bytes(),
        )
        return grpc.secure_channel(f"localhost:{self.port}", credentials, options=OPTIONS)

    def stored(self) -> int:
        with self.receiver.sessions() as s:
            rows = int(s.execute(select(func.count()).select_from(ReceivedRelease)).scalar_one())
        releases = self.settings.data_dir / "releases"
        files = list(releases.glob("*")) if releases.exists() else []
        assert len(files) == rows, "a file without its row, or a row without its file"
        return rows

    def stored_file(self, release_id: str) -> Path:
        """Where the receiver stored a release: a name it chose, inside its data directory."""
        with self.receiver.sessions() as s:
            row = s.get(ReceivedRelease, release_id)
        assert row is not None
        path = Path(row.path)
        assert path.parent == self.settings.data_dir / "releases" and release_id not in path.name
        return path

    def deliver_model(self, envelope: bytes) -> grpc.StatusCode:
        """Send a model message; the call's status (OK when stored or replayed)."""
        call = self.channel.unary_unary(
            "/labeldp.v1.FeaturesParty/DeliverModel",
            request_serializer=pb.SignedModel.SerializeToString,
            response_deserializer=pb.ModelReceipt.FromString,
        )
        try:
            call(pb.SignedModel(envelope=envelope), timeout=30)
        except grpc.RpcError as exc:
            status: grpc.StatusCode = exc.code()
            return status
        return grpc.StatusCode.OK

    def models_stored(self) -> int:
        with self.receiver.sessions() as s:
            rows = int(s.execute(select(func.count()).select_from(ReceivedModel)).scalar_one())
        folder = self.settings.data_dir / "models-received"
        files = list(folder.glob("*")) if folder.exists() else []
        assert len(files) == rows, "a file without its row, or a row without its file"
        return rows

    def no_leftovers(self) -> bool:
        tmp = self.settings.data_dir / "tmp"
        return not tmp.exists() or not any(p.is_file() for p in tmp.rglob("*"))


def start(
    tmp_path: Path,
    *,
    tls: bool = False,
    max_bytes: int = 1 << 30,
    party: str = "publisher",
    idle_s: float = 60.0,
    workers: int = 32,
    **limits: float,
) -> Harness:
    """A receiver on loopback; ``limits``: more of its settings (``stream_header_seconds``,
    ``grpc_streams_per_peer``, …)."""
    data = tmp_path / f"features-{uuid.uuid4().hex[:6]}"
    certs = dev_ca(tmp_path / "certs", other_clients=("mallory",)) if tls else None
    settings = FeaturesSettings(
        party_id=party,
        data_dir=data,
        grpc_port=0,
        allow_plaintext=not tls,
        tls_cert=certs.server_cert if certs else None,
        tls_key=certs.server_key if certs else None,
        tls_ca=certs.ca if certs else None,
        max_release_bytes=max_bytes,
        stream_idle_seconds=idle_s,
        grpc_workers=workers,
        **limits,  # type: ignore[arg-type]
    )
    data.mkdir(parents=True)
    engine = make_engine(settings.resolved_database_url())
    migrate(engine)
    sessions = session_factory(engine)
    sender = Identity.generate()
    with sessions.begin() as s:
        tenant = tenants.create_tenant(s, "publisher-ml").tenant_id
        s.add(
            Sender(
                tenant_id=tenant,
                id=SENDER,
                key_id=sender.key_id,
                public_key_pem=public_key_pem(sender.public_key),
            )
        )
    metrics = FeaturesMetrics()
    receiver = Receiver(sessions, DataDir(data), party, max_bytes, on_outcome=metrics.record_delivery)
    server, port = build_server(receiver, settings)
    if certs:
        creds = grpc.ssl_channel_credentials(
            root_certificates=certs.ca.read_bytes(),
            private_key=certs.client_key.read_bytes(),
            certificate_chain=certs.client_cert.read_bytes(),
        )
        channel = grpc.secure_channel(f"localhost:{port}", creds, options=OPTIONS)
    else:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
    return Harness(settings, sender, channel, server, receiver, port, metrics, tenant)


def encode_ids(ids: pa.Array) -> bytes:
    """Example IDs as a chunk carries them (a zstd-compressed Arrow IPC stream), whatever they hold."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, ID_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_batch(pa.record_batch([ids], schema=ID_SCHEMA))
    return bytes(sink.getvalue().to_pybytes())


def split(frames: list[pb.ReleaseFrame]) -> tuple[pb.ReleaseHeader, list[pb.Chunk]]:
    return pb.ReleaseHeader.FromString(frames[0].header.header), [f.chunk for f in frames[1:]]


def signed(
    header: pb.ReleaseHeader, chunks: list[pb.Chunk], identity: Identity, *, keep_counts: bool = False
) -> list[pb.ReleaseFrame]:
    """A message as a pinned (but hostile) sender would send it: the header's digest (and, unless
    ``keep_counts``, its counts) recomputed over ``chunks``, and the header signed by ``identity``."""
    header = pb.ReleaseHeader.FromString(header.SerializeToString())
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.SerializeToString(deterministic=True))
    header.payload_sha256 = digest.digest()
    header.sender_key_id = identity.key_id
    if not keep_counts:
        header.chunk_count, header.example_count = len(chunks), sum(c.examples for c in chunks)
    data = header.SerializeToString(deterministic=True)
    first = pb.ReleaseFrame(header=pb.SignedHeader(header=data, signature=identity.sign(data)))
    return [first, *(pb.ReleaseFrame(chunk=c) for c in chunks)]


def model_payload(identity: Identity, width: int = 3, **changes: object) -> ModelPayload:
    """A small, valid model message's payload (a number and a 2-category column; no torch needed)."""
    now = int(time.time() * 1000)
    shapes = weight_shapes(1, 2, width)
    weights = {
        name: [0.1] * shape[0]
        if len(shape) == 1
        else [[0.01 * (i + j) for j in range(shape[1])] for i in range(shape[0])]
        for name, shape in shapes.items()
    }
    payload = ModelPayload(
        model_id=str(uuid.uuid4()),
        sender_id=SENDER,
        sender_key_id=identity.key_id,
        recipient_id=RECEIVER,
        dataset_id=str(uuid.uuid4()),
        created_at_unix_ms=now,
        expires_at_unix_ms=now + 3_600_000,
        guarantee=Guarantee(
            epsilon_labels=1.0,
            label_release_id=str(uuid.uuid4()),
            epsilon_dpsgd=2.0,
            delta=1e-7,
            epsilon_total=3.0,
            accountant="prv",
            noise_multiplier=1.1,
            sampling_rate=0.01,
            steps=300,
            clip_norm=1.0,
            examples=10_000,
        ),
        non_sensitive=[Column(name="hour", kind="number", lo=0, hi=23)],
        semi_sensitive=[Column(name="device", kind="category", categories=["ios", "android"])],
        architecture={"width": width},
        weights=weights,
    )
    return payload.model_copy(update=changes)
