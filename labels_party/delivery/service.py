"""Recipients and deliveries: where a release may go, and streaming its stored message there."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import grpc
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from labeldp.common.db import owned, utcnow
from labeldp.common.errors import DomainError
from labeldp.common.instance import Instance
from labeldp.common.pages import PageRequest
from labels_party.config import LabelsSettings
from labels_party.delivery.addresses import Target, UnresolvedError, check_address, dial_target
from labels_party.delivery.client import BACKOFF_CAP_S, Outcome, deliver, deliver_model
from labels_party.metrics import LabelsMetrics
from labels_party.storage.orm import Delivery, Recipient, Release, SemiSensitiveModel

log = logging.getLogger("labeldp.labels.delivery")


TRANSPORT = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "INTERNAL", "CANCELLED", "UNIMPLEMENTED"}
UNREACHABLE = (
    "the recipient could not be reached or did not answer as a labeldp receiver "
    "(the operator's log has the detail)"
)
FAILED_HERE = "the labels party failed while sending (the operator's log has the detail)"
INTERRUPTED = (
    "the labels party stopped before the recipient answered; the recipient may hold the release: "
    "deliver again (the same bytes, free; a recipient that has it answers the same receipt)"
)


def told(outcome: Outcome, what: str) -> str:
    """What a tenant is told of a failed delivery: a receiver's own refusal as it gave it, but nothing
    of the network (connection refused, TLS handshake failed, …): that would make the labels party a
    port scanner for anyone who can register a recipient. The full detail goes to the log."""
    if outcome.delivered or outcome.status not in TRANSPORT:
        return outcome.detail[:2000]
    log.warning("delivery did not reach the recipient", extra={"release_id": what, "status": outcome.status})
    log.debug("transport detail: %s", outcome.detail[:2000])
    return UNREACHABLE


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
    raise DomainError(
        "tls-not-configured",
        "register the recipient's tls_ca_pem and set LABELDP_TLS_CERT / LABELDP_TLS_KEY, "
        "or set LABELDP_ALLOW_PLAINTEXT=true for local development",
        status=409,
    )


class RecipientService:
    def __init__(self, sessions: sessionmaker[Session], allowed_hosts: str | None = None) -> None:
        self.sessions, self.allowed_hosts = sessions, allowed_hosts

    def register(
        self,
        tenant_id: str,
        name: str,
        grpc_address: str | None,
        tls_ca_pem: str | None,
        fingerprint: str | None,
        recipient_tenant: str | None = None,
    ) -> Recipient:
        """A features party that this tenant's releases may be addressed (and delivered) to."""
        if tls_ca_pem is not None and "BEGIN CERTIFICATE" not in tls_ca_pem:
            raise DomainError("invalid-certificate", "tls_ca_pem must be a PEM certificate")
        if grpc_address is not None:
            check_address(grpc_address, self.allowed_hosts)
        try:
            with self.sessions.begin() as session:
                recipient = Recipient(
                    id=str(uuid.uuid4()),
                    tenant_id=tenant_id,
                    name=name,
                    grpc_address=grpc_address,
                    tls_ca_pem=tls_ca_pem,
                    fingerprint=fingerprint,
                    recipient_tenant=recipient_tenant,
                )
                session.add(recipient)
                session.flush()
                return recipient
        except IntegrityError as exc:
            raise DomainError(
                "recipient-exists", f"a recipient named {name!r} already exists", status=409
            ) from exc

    def list(self, tenant_id: str, paging: PageRequest) -> list[Recipient]:
        with self.sessions() as session:
            query = (
                select(Recipient)
                .where(Recipient.tenant_id == tenant_id)
                .order_by(Recipient.created_at, Recipient.id)
            )
            return list(session.execute(paging.window(query)).scalars())


class DeliveryService:
    """Deliveries of releases, each recorded before the recipient is dialled (``sending``, with this
    process as its owner) and completed after: a labels party killed between the recipient storing the
    release and the answer reaching it used to leave no record at all, while the publisher held the
    release. Recovery records a ``sending`` delivery whose owner is gone — or that has outlived every
    attempt's deadline and backoff — as ``interrupted``: the recipient may hold the release, and
    delivering again sends the same bytes (free; a receiver that has it answers the same receipt)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        settings: LabelsSettings,
        metrics: LabelsMetrics,
        instance: Instance | None = None,
    ) -> None:
        self.sessions, self.settings, self.metrics = sessions, settings, metrics
        self.instance = instance or Instance.current(settings.instance_name)

    def deliver(self, tenant_id: str, release_id: str) -> Delivery:
        """Stream the release's stored message to its recipient; the attempt is recorded whatever its
        outcome. A recipient that refuses answers 502 with its gRPC status."""
        try:
            delivery = self._deliver(tenant_id, release_id)
        except DomainError:
            self.metrics.deliveries.labels("refused").inc()
            raise
        self.metrics.deliveries.labels(delivery.outcome).inc()
        if delivery.outcome != "delivered":
            raise DomainError(
                "delivery-failed",
                f"the recipient answered {delivery.status}: {delivery.detail}",
                status=502,
                delivery_id=delivery.id,
                grpc_status=delivery.status,
                attempts=delivery.attempts,
            )
        return delivery

    def _deliver(self, tenant_id: str, release_id: str) -> Delivery:
        with self.sessions() as session:
            release = owned(session, Release, release_id, tenant_id, "release")
            if release.status != "complete":
                raise DomainError(
                    "release-not-complete", f"release {release_id} is {release.status}", status=409
                )
            recipient = session.get(Recipient, release.recipient_id)
            assert recipient is not None  # a foreign key
        if not recipient.grpc_address:
            raise DomainError(
                "recipient-has-no-address", f"recipient {recipient.name!r} has no grpc_address", status=409
            )
        check_address(recipient.grpc_address, self.settings.recipient_hosts)
        path = self.settings.paths().message(release_id)
        if not path.exists():
            raise DomainError("message-missing", f"release {release_id} has no stored message", status=409)
        credentials = credentials_for(recipient, self.settings)
        target = self._target(recipient.grpc_address)
        delivery = Delivery(
            id=str(uuid.uuid4()),
            release_id=release_id,
            tenant_id=tenant_id,
            recipient_id=recipient.id,
            outcome="sending",
            attempts=0,
            status="",
            detail="",
            wire_bytes=path.stat().st_size,
            started_at=utcnow(),
            owner=self.instance.token,
        )
        with self.sessions.begin() as session:  # before the recipient is dialled
            session.add(delivery)
        try:
            outcome = (
                deliver(
                    path,
                    target,
                    credentials,
                    timeout_s=self.settings.delivery_timeout_seconds,
                    attempts=self.settings.delivery_attempts,
                )
                if isinstance(target, Target)
                else Outcome(False, 1, "UNAVAILABLE", target, None, delivery.wire_bytes)
            )
        except BaseException:
            self._finish(delivery.id, "failed", 0, "INTERNAL", FAILED_HERE, None)
            raise
        return self._finish(
            delivery.id,
            "delivered" if outcome.delivered else "failed",
            outcome.attempts,
            outcome.status,
            told(outcome, release_id),
            outcome.receipt.payload_sha256.hex() if outcome.receipt else None,
        )

    def _target(self, address: str) -> Target | str:
        """Where to dial (``addresses.dial_target``: a name resolved now, each of its addresses
        checked, 422 when one is link-local), or why it cannot be dialled (an unresolved name: told as
        unreachable)."""
        try:
            return dial_target(address, self.settings.recipient_hosts)
        except UnresolvedError as exc:
            return f"the recipient's name did not resolve: {exc}"

    def _finish(
        self, delivery_id: str, outcome: str, attempts: int, status: str, detail: str, receipt: str | None
    ) -> Delivery:
        with self.sessions.begin() as session:
            delivery = session.get(Delivery, delivery_id)
            assert delivery is not None  # recorded above
            delivery.outcome, delivery.attempts, delivery.status = outcome, attempts, status
            delivery.detail, delivery.receipt_sha256, delivery.finished_at = detail, receipt, utcnow()
        return delivery

    def longest_seconds(self) -> float:
        """How long a delivery can take: every attempt's deadline and the longest backoff after it."""
        return self.settings.delivery_attempts * (self.settings.delivery_timeout_seconds + BACKOFF_CAP_S)

    def recover(self) -> int:
        """Record every ``sending`` delivery whose owner is gone (or that outlived ``longest_seconds``,
        plus a minute: an owner on another host) as ``interrupted``; how many."""
        cutoff = utcnow() - timedelta(seconds=self.longest_seconds() + 60)
        with self.sessions.begin() as session:
            sending = session.execute(select(Delivery).where(Delivery.outcome == "sending")).scalars().all()
            stale = [d for d in sending if self.instance.owner_is_gone(d.owner) or d.started_at < cutoff]
            for delivery in stale:
                delivery.outcome, delivery.status, delivery.detail = "interrupted", "UNKNOWN", INTERRUPTED
                delivery.finished_at = utcnow()
        return len(stale)

    def deliver_model(self, tenant_id: str, model_id: str, message: bytes) -> Outcome:
        """Send a complete model's signed message to its recipient (its label release's); 502 with the
        gRPC status when the recipient refuses."""
        with self.sessions() as session:
            model = owned(session, SemiSensitiveModel, model_id, tenant_id, "model")
            recipient_id = model.recipient_id
            if recipient_id is None:  # a row from before models named their recipient
                release = session.get(Release, model.label_release_id)
                assert release is not None  # a foreign key
                recipient_id = release.recipient_id
            recipient = session.get(Recipient, recipient_id)
            assert recipient is not None
        if not recipient.grpc_address:
            raise DomainError(
                "recipient-has-no-address", f"recipient {recipient.name!r} has no grpc_address", status=409
            )
        credentials = credentials_for(recipient, self.settings)
        target = self._target(recipient.grpc_address)
        outcome = (
            deliver_model(
                message,
                model_id,
                target,
                credentials,
                timeout_s=self.settings.delivery_timeout_seconds,
                attempts=self.settings.delivery_attempts,
            )
            if isinstance(target, Target)
            else Outcome(False, 1, "UNAVAILABLE", target, None, len(message))
        )
        self.metrics.deliveries.labels("delivered" if outcome.delivered else "failed").inc()
        if not outcome.delivered:
            raise DomainError(
                "delivery-failed",
                f"the recipient answered {outcome.status}: {told(outcome, model_id)}",
                status=502,
                grpc_status=outcome.status,
                attempts=outcome.attempts,
            )
        return outcome

    def of_release(self, tenant_id: str, release_id: str, paging: PageRequest) -> list[Delivery]:
        with self.sessions() as session:
            owned(session, Release, release_id, tenant_id, "release")
            query = (
                select(Delivery)
                .where(Delivery.release_id == release_id)
                .order_by(Delivery.started_at, Delivery.id)
            )
            return list(session.execute(paging.window(query)).scalars())
