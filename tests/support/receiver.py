"""Shared test helpers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import grpc
from sqlalchemy import func, select

from features_party.config import FeaturesSettings
from features_party.metrics import FeaturesMetrics
from features_party.receiver.server import build_server
from features_party.receiver.service import Receiver
from features_party.storage.data_dir import DataDir
from features_party.storage.db import make_engine, migrate, session_factory
from features_party.storage.orm import ReceivedRelease, Sender
from labeldp.common.identity import Identity, public_key_pem
from labeldp.common.tls import dev_ca
from labeldp.common.wire.format import MAX_MESSAGE_BYTES
from labeldp.v1 import delivery_pb2 as pb
from labeldp.v1 import delivery_pb2_grpc as pb_grpc
from tests.support.messages import SENDER

OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES + 2**20)]


@dataclass
class Harness:
    settings: FeaturesSettings
    sender: Identity
    channel: grpc.Channel
    server: grpc.Server
    receiver: Receiver
    port: int
    metrics: FeaturesMetrics

    @property
    def stub(self) -> pb_grpc.FeaturesPartyStub:
        return pb_grpc.FeaturesPartyStub(self.channel)  # type: ignore[no-untyped-call]

    def raw(self) -> grpc.StreamUnaryMultiCallable:
        """Send frames as raw bytes (so tampered bytes reach the server unparsed)."""
        return self.channel.stream_unary(
            "/labeldp.v1.FeaturesParty/DeliverRelease", response_deserializer=pb.DeliveryReceipt.FromString
        )

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
) -> Harness:
    data = tmp_path / f"features-{uuid.uuid4().hex[:6]}"
    certs = dev_ca(tmp_path / "certs") if tls else None
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
    )
    data.mkdir(parents=True)
    engine = make_engine(settings.resolved_database_url())
    migrate(engine)
    sessions = session_factory(engine)
    sender = Identity.generate()
    with sessions.begin() as s:
        s.add(Sender(id=SENDER, key_id=sender.key_id, public_key_pem=public_key_pem(sender.public_key)))
    metrics = FeaturesMetrics()
    receiver = Receiver(
        sessions, DataDir(data), party, max_bytes, on_outcome=metrics.record_delivery, idle_timeout_s=idle_s
    )
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
    return Harness(settings, sender, channel, server, receiver, port, metrics)
