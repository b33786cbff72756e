"""A release's signed message, built once when the release completes and stored as frames on disk, so
every (re-)delivery sends exactly the same bytes and spends nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from labeldp.common.identity import Identity
from labeldp.common.wire.sender import MessageHeader, Pieces, store_message
from labeldp.mechanisms import PublishedMechanism
from labels_party.storage.data_dir import DataDir
from labels_party.storage.orm import Recipient


@dataclass(frozen=True)
class Addressee:
    """Whom a message is for: the features party (its party id) and, when the recipient names it, its
    tenant there (signed into the message: ``recipient_tenant``)."""

    party_id: str
    tenant: str | None = None

    @classmethod
    def of(cls, recipient: Recipient) -> Addressee:
        return cls(recipient.name, recipient.recipient_tenant)


@dataclass(frozen=True)
class Signer:
    identity: Identity
    party_id: str
    ttl_seconds: int


def write_message(
    data_dir: DataDir,
    signer: Signer,
    *,
    release_id: str,
    recipient: Addressee,
    label_type: str,
    mechanism: PublishedMechanism,
    pieces: Pieces,
    groups: tuple[PublishedMechanism, ...] = (),
    priors_id: str = "",
) -> Path:
    """Store the signed message of ``pieces`` ((example IDs, bins) in order; a feature-aware release's
    with each example's group, and its ``groups``' mechanisms), streamed to disk."""
    now = int(time.time() * 1000)
    header = MessageHeader(
        release_id=release_id,
        sender_id=signer.party_id,
        recipient_id=recipient.party_id,
        created_at_unix_ms=now,
        expires_at_unix_ms=now + 1000 * signer.ttl_seconds,
        label_type=label_type,
        mechanism=mechanism,
        recipient_tenant=recipient.tenant or "",
        groups=groups,
        priors_id=priors_id,
    )
    path = data_dir.message(release_id)
    store_message(path, header, pieces, signer.identity)
    return path
