"""Pinned senders and received releases, as the rest of the features party reads them.

The published mechanism of a received release is read back from the signed header bytes stored with
it (the one source of truth), through the same mapping the receiver validated it with.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from features_party.storage.orm import ReceivedModel, ReceivedRelease, Sender
from labeldp.common.errors import DomainError, not_found
from labeldp.common.identity import fingerprint, load_public_key, public_key_pem
from labeldp.common.inputs import is_uuid
from labeldp.common.pages import PageRequest
from labeldp.common.wire.mechanism import mechanism_from_header
from labeldp.mechanisms import PublishedMechanism
from labeldp.v1 import delivery_pb2 as pb


def published_mechanism(release: ReceivedRelease) -> PublishedMechanism:
    return mechanism_from_header(pb.ReleaseHeader.FromString(release.signed_header))


class SenderRegistry:
    """Labels parties whose signed releases are accepted, pinned by their public keys."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def pin(self, sender_id: str, pem: str) -> Sender:
        try:
            key = load_public_key(pem)
        except ValueError as exc:
            raise DomainError("invalid-public-key", str(exc)) from exc
        try:
            with self.sessions.begin() as session:
                sender = Sender(id=sender_id, key_id=fingerprint(key), public_key_pem=public_key_pem(key))
                session.add(sender)
                session.flush()
                return sender
        except IntegrityError as exc:
            raise DomainError("sender-exists", f"sender {sender_id!r} is already pinned", status=409) from exc

    def list(self, paging: PageRequest) -> list[Sender]:
        with self.sessions() as session:
            query = select(Sender).order_by(Sender.created_at, Sender.id)
            return list(session.execute(paging.window(query)).scalars())

    def pinned_key(self, sender_id: str, key_id: str) -> Ed25519PublicKey | None:
        """The key a message claiming to be from ``sender_id`` signed with ``key_id`` must verify under."""
        with self.sessions() as session:
            sender = session.get(Sender, sender_id)
        if sender is None or sender.key_id != key_id:
            return None
        return load_public_key(sender.public_key_pem)


class ReceivedReleases:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def list(self, paging: PageRequest) -> list[ReceivedRelease]:
        with self.sessions() as session:
            query = select(ReceivedRelease).order_by(ReceivedRelease.received_at, ReceivedRelease.release_id)
            return list(session.execute(paging.window(query)).scalars())

    def get(self, release_id: str) -> ReceivedRelease:
        if not is_uuid(release_id):
            raise not_found("release", release_id)
        with self.sessions() as session:
            release = session.get(ReceivedRelease, release_id)
        if release is None:
            raise not_found("release", release_id)
        return release


class ReceivedModels:
    """Models trained with semi-sensitive features, as received and verified (docs/semi-sensitive.md)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def list(self, paging: PageRequest) -> list[ReceivedModel]:
        with self.sessions() as session:
            query = select(ReceivedModel).order_by(ReceivedModel.received_at, ReceivedModel.model_id)
            return list(session.execute(paging.window(query)).scalars())

    def get(self, model_id: str) -> ReceivedModel:
        if not is_uuid(model_id):
            raise not_found("model", model_id)
        with self.sessions() as session:
            model = session.get(ReceivedModel, model_id)
        if model is None:
            raise not_found("model", model_id)
        return model

    def artifact(self, model_id: str) -> bytes:
        """The signed message exactly as received: the one self-contained artifact (weights, columns,
        guarantee, signature), verifiable again by anyone who pins the sender's key."""
        return Path(self.get(model_id).path).read_bytes()
