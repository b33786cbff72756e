"""Pinned senders and received releases, as the rest of the features party reads them.

Pins belong to tenants, and so does what they deliver: a tenant reads the releases and models its own
pins verified, and those of legacy pins no tenant could be credited with (``tenant_id`` NULL,
migration f0008); anyone else's answer 404 like a missing one (the rule of ``labeldp.common.db.owned``).

The published mechanism of a received release is read back from the signed header bytes stored with
it (the one source of truth), through the same mapping the receiver validated it with.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Protocol

import pyarrow as pa
from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from features_party.storage.orm import ReceivedModel, ReceivedRelease, Sender
from labeldp.common.errors import DomainError, not_found
from labeldp.common.identity import fingerprint, load_public_key, public_key_pem
from labeldp.common.inputs import is_uuid
from labeldp.common.model_message import Pin
from labeldp.common.pages import PageRequest
from labeldp.common.wire.mechanism import groups_from_header, mechanism_from_header
from labeldp.mechanisms import PublishedMechanism
from labeldp.v1 import delivery_pb2 as pb


@functools.lru_cache(maxsize=256)
def _mechanism(signed_header: bytes) -> PublishedMechanism:
    return mechanism_from_header(pb.ReleaseHeader.FromString(signed_header))


def published_mechanism(release: ReceivedRelease) -> PublishedMechanism:
    """The release's mechanism, derived once per process per header (a listing or a training job reads
    it again and again; the description is immutable)."""
    return _mechanism(release.signed_header)


@functools.lru_cache(maxsize=64)
def _groups(signed_header: bytes) -> tuple[PublishedMechanism, ...]:
    return groups_from_header(pb.ReleaseHeader.FromString(signed_header))


def group_mechanisms(release: ReceivedRelease) -> tuple[PublishedMechanism, ...]:
    """A feature-aware release's group mechanisms, in group order (the ``group`` column of its stored
    file indexes them); empty for a release without groups. Derived from the signed header as
    ``published_mechanism``, once per process per header."""
    return _groups(release.signed_header)


def release_schema(grouped: bool) -> pa.Schema:
    """A received release's Parquet columns: each example's ID and released bin and, for a
    feature-aware release, its group (-1: the release's own mechanism; < 1,024 groups fit int16)."""
    fields = [("example_id", pa.string()), ("bin", pa.uint16())]
    return pa.schema([*fields, ("group", pa.int16())] if grouped else fields)


def grouping(release: ReceivedRelease) -> tuple[str | None, int]:
    """A release's priors id (None: no groups) and its number of groups, as its stored summary
    states them (``summary_of``: no header parsing for a listing)."""
    summary = release.summary if isinstance(release.summary, dict) else {}
    priors, count = summary.get("priors_id"), summary.get("group_count")
    return (priors if isinstance(priors, str) and priors else None), (count if isinstance(count, int) else 0)


class _Received(Protocol):
    tenant_id: str | None


def visible(row: _Received, tenant_id: str) -> bool:
    """The caller's own, or a legacy row no tenant could be credited with."""
    return row.tenant_id is None or row.tenant_id == tenant_id


def _visible_to(column: InstrumentedAttribute[str | None], tenant_id: str) -> ColumnElement[bool]:
    return or_(column == tenant_id, column.is_(None))


MAX_PINS_PER_TENANT = 1000  # every delivery looks its sender's pins up; a tenant's own are bounded


class SenderRegistry:
    """Labels parties whose signed releases are accepted, pinned by a tenant with their public keys."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def pin(self, tenant_id: str, sender_id: str, pem: str) -> Sender:
        """Pin ``sender_id``'s key for ``tenant_id``: another tenant may pin the same sender id, even with
        the same key — it affects only what that tenant receives (messages name the tenant they are
        for: ``for_tenant``); a tenant pins a sender id once (409) and at most ``MAX_PINS_PER_TENANT``
        senders (409 ``too-many-senders``)."""
        try:
            key = load_public_key(pem)
        except ValueError as exc:
            raise DomainError("invalid-public-key", str(exc)) from exc
        with self.sessions() as session:
            pins = session.execute(select(func.count()).where(Sender.tenant_id == tenant_id)).scalar_one()
        if pins >= MAX_PINS_PER_TENANT:
            raise DomainError(
                "too-many-senders", f"a tenant pins at most {MAX_PINS_PER_TENANT} senders", status=409
            )
        try:
            with self.sessions.begin() as session:
                sender = Sender(
                    tenant_id=tenant_id,
                    id=sender_id,
                    key_id=fingerprint(key),
                    public_key_pem=public_key_pem(key),
                )
                session.add(sender)
                session.flush()
                return sender
        except IntegrityError as exc:
            raise DomainError("sender-exists", f"sender {sender_id!r} is already pinned", status=409) from exc

    def pins(self, sender_id: str, key_id: str) -> list[Pin]:
        """Every pin of ``sender_id`` under ``key_id``, whichever tenant made it: a message's signature
        decides which of them it verifies under, and its owner is that pin's tenant."""
        with self.sessions() as session:
            found = session.execute(
                select(Sender.public_key_pem, Sender.tenant_id).where(
                    Sender.id == sender_id, Sender.key_id == key_id
                )
            ).all()
        return [Pin(load_public_key(pem), tenant) for pem, tenant in found]

    def list(self, tenant_id: str, paging: PageRequest) -> list[Sender]:
        with self.sessions() as session:
            query = (
                select(Sender)
                .where(_visible_to(Sender.tenant_id, tenant_id))
                .order_by(Sender.created_at, Sender.id, Sender.pin_id)
            )
            return list(session.execute(paging.window(query)).scalars())


class ReceivedReleases:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def list(self, tenant_id: str, paging: PageRequest) -> list[ReceivedRelease]:
        with self.sessions() as session:
            query = (
                select(ReceivedRelease)
                .where(_visible_to(ReceivedRelease.tenant_id, tenant_id))
                .order_by(ReceivedRelease.received_at, ReceivedRelease.release_id)
            )
            return list(session.execute(paging.window(query)).scalars())

    def get(self, tenant_id: str, release_id: str) -> ReceivedRelease:
        """The tenant's release; another tenant's answers 404 like a missing one."""
        if not is_uuid(release_id):
            raise not_found("release", release_id)
        with self.sessions() as session:
            release = session.get(ReceivedRelease, release_id)
        if release is None or not visible(release, tenant_id):
            raise not_found("release", release_id)
        return release


class ReceivedModels:
    """Models trained with semi-sensitive features, as received and verified (docs/semi-sensitive.md)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def list(self, tenant_id: str, paging: PageRequest) -> list[ReceivedModel]:
        with self.sessions() as session:
            query = (
                select(ReceivedModel)
                .where(_visible_to(ReceivedModel.tenant_id, tenant_id))
                .order_by(ReceivedModel.received_at, ReceivedModel.model_id)
            )
            return list(session.execute(paging.window(query)).scalars())

    def get(self, tenant_id: str, model_id: str) -> ReceivedModel:
        if not is_uuid(model_id):
            raise not_found("model", model_id)
        with self.sessions() as session:
            model = session.get(ReceivedModel, model_id)
        if model is None or not visible(model, tenant_id):
            raise not_found("model", model_id)
        return model

    def artifact(self, tenant_id: str, model_id: str) -> bytes:
        """The signed message exactly as received: the one self-contained artifact (weights, columns,
        guarantee, signature), verifiable again by anyone who pins the sender's key."""
        return Path(self.get(tenant_id, model_id).path).read_bytes()
