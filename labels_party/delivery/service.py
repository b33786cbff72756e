"""Delivering a release: resolve its recipient and transport, stream the stored message, log it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import grpc
from sqlalchemy.orm import Session, sessionmaker

from labels_party.config import LabelsSettings
from labels_party.delivery.client import deliver
from labels_party.delivery.message import message_path
from labels_party.storage.orm import Delivery, Recipient, Release, utcnow


@dataclass
class DeliveryError(Exception):
    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def credentials_for(recipient: Recipient, settings: LabelsSettings) -> grpc.ChannelCredentials | None:
    """mTLS when the recipient's CA and this party's client certificate are configured; plaintext
    only when explicitly allowed for local development."""
    if recipient.tls_ca_pem and settings.tls_cert and settings.tls_key:
        return grpc.ssl_channel_credentials(
            root_certificates=recipient.tls_ca_pem.encode(),
            private_key=settings.tls_key.read_bytes(),
            certificate_chain=settings.tls_cert.read_bytes(),
        )
    if settings.allow_plaintext:
        return None
    raise DeliveryError(
        409,
        "tls-not-configured",
        "register the recipient's tls_ca_pem and set LABELDP_TLS_CERT / LABELDP_TLS_KEY, "
        "or set LABELDP_ALLOW_PLAINTEXT=true for local development",
    )


def deliver_release(
    sessions: sessionmaker[Session], settings: LabelsSettings, tenant_id: str, release_id: str
) -> Delivery:
    with sessions() as session:
        release = session.get(Release, release_id)
        if release is None or release.tenant_id != tenant_id:
            raise DeliveryError(404, "not-found", f"no release {release_id}")
        if release.status != "complete":
            raise DeliveryError(409, "release-not-complete", f"release {release_id} is {release.status}")
        recipient = session.get(Recipient, release.recipient_id)
        assert recipient is not None
    if not recipient.grpc_address:
        raise DeliveryError(
            409, "recipient-has-no-address", f"recipient {recipient.name!r} has no grpc_address"
        )
    path = message_path(settings.data_dir, release_id)
    if not path.exists():
        raise DeliveryError(409, "message-missing", f"release {release_id} has no stored message")
    credentials = credentials_for(recipient, settings)
    started = utcnow()
    outcome = deliver(
        path,
        recipient.grpc_address,
        credentials,
        timeout_s=settings.delivery_timeout_seconds,
        attempts=settings.delivery_attempts,
    )
    delivery = Delivery(
        id=str(uuid.uuid4()),
        release_id=release_id,
        tenant_id=tenant_id,
        recipient_id=recipient.id,
        outcome="delivered" if outcome.delivered else "failed",
        attempts=outcome.attempts,
        status=outcome.status,
        detail=outcome.detail[:2000],
        receipt_sha256=outcome.receipt.payload_sha256.hex() if outcome.receipt else None,
        wire_bytes=outcome.wire_bytes,
        started_at=started,
        finished_at=utcnow(),
    )
    with sessions.begin() as session:
        session.add(delivery)
    return delivery
