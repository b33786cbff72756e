"""SQL tables of the features party: tenants, pinned senders, received releases, feature tables and
models (the bulk data itself is Parquet and skops files under the data directory)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from labeldp.common.db import UTCDateTime, utcnow


class Base(DeclarativeBase):
    pass


def _new_id() -> str:
    return str(uuid.uuid4())


class Sender(Base):
    """A labels party whose signed releases this party accepts, pinned by a tenant with its public key.

    A sender id is unique per tenant: two tenants may pin the same sender id, each with the key it
    trusts, and what a message delivers belongs to the tenant whose pin its signature verifies under.
    ``tenant_id`` is NULL only for pins made before pins had owners that no tenant can be credited
    with (migration f0008): what those deliver is readable by every tenant, as it was then."""

    __tablename__ = "senders"
    __table_args__ = (UniqueConstraint("tenant_id", "id", name="uq_senders_tenant_id_id"),)

    pin_id: Mapped[str] = mapped_column(String(36), primary_key=True, default=_new_id)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), nullable=True, index=True)
    id: Mapped[str] = mapped_column(String(200), index=True)
    key_id: Mapped[str] = mapped_column(String(80))
    public_key_pem: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ReceivedRelease(Base):
    """A verified release. The row and the Parquet file at ``path`` are committed together."""

    __tablename__ = "received_releases"

    release_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # the tenant whose pin the signature verified under; NULL: a legacy pin, readable by every tenant
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), nullable=True, index=True)
    sender_id: Mapped[str] = mapped_column(String(200))
    sender_key_id: Mapped[str] = mapped_column(String(80))
    payload_sha256: Mapped[str] = mapped_column(String(64))
    example_count: Mapped[int] = mapped_column(BigInteger)
    chunk_count: Mapped[int] = mapped_column(Integer)
    signed_header: Mapped[bytes] = mapped_column(LargeBinary)  # exactly as received, with its signature
    signature: Mapped[bytes] = mapped_column(LargeBinary)
    summary: Mapped[dict[str, object]] = mapped_column(JSON)  # label type, ε split, mechanism, expiry
    path: Mapped[str] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ReceivedModel(Base):
    """A verified model message (training with semi-sensitive features). The row and the message file
    at ``path`` (exactly the bytes received: the one artifact) are committed together."""

    __tablename__ = "received_models"

    model_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"), nullable=True, index=True)
    sender_id: Mapped[str] = mapped_column(String(200))
    sender_key_id: Mapped[str] = mapped_column(String(80))
    message_sha256: Mapped[str] = mapped_column(String(64))
    label_release_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: DP-SGD alone
    guarantee: Mapped[dict[str, object]] = mapped_column(JSON)
    columns: Mapped[dict[str, object]] = mapped_column(JSON)  # non_sensitive and semi_sensitive declarations
    path: Mapped[str] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Tenant(Base):
    """A team of the publisher using this features party (bearer keys per tenant)."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class FeatureTable(Base):
    """A tenant's feature table; the data is versioned Parquet under the data directory."""

    __tablename__ = "feature_tables"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer, default=0)
    rows: Mapped[int] = mapped_column(BigInteger, default=0)
    schema: Mapped[dict[str, str]] = mapped_column(JSON)
    # the columns the publisher declares non-sensitive: the only ones it may export to the labels party
    # for training with semi-sensitive features (docs/semi-sensitive.md)
    non_sensitive: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TrainingJob(Base):
    """A training job and, once it succeeds, its model (saved with skops under the data directory);
    the job's id is the model's id."""

    __tablename__ = "training_jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    release_id: Mapped[str] = mapped_column(String(64))
    feature_table: Mapped[str] = mapped_column(String(200))
    feature_table_version: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # hgb | linear | lightgbm
    debias: Mapped[str] = mapped_column(String(16))
    loss: Mapped[str] = mapped_column(String(16))
    validation_fraction: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # queued | running | succeeded | failed
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the process that queued and runs the job, and until when its heartbeat vouches for it
    owner: Mapped[str | None] = mapped_column(String(120), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    progress: Mapped[dict[str, object]] = mapped_column(JSON)
    metrics: Mapped[dict[str, object]] = mapped_column(JSON)
    provenance: Mapped[dict[str, object]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class PricingGrant(Base):
    """Which of a tenant's trained models prices the examples a pinned sender asks about (feature-aware
    priors, ``features_party/pricing``): one per (tenant, sender); without one, the sender's pricing
    requests to this tenant are refused."""

    __tablename__ = "pricing_grants"
    __table_args__ = (UniqueConstraint("tenant_id", "sender_id", name="uq_pricing_grants_tenant_sender"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=_new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    sender_id: Mapped[str] = mapped_column(String(200))
    model_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id"))
    max_groups: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the tenant's cap on G
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Pricing(Base):
    """One answered pricing request — what left this party: how many examples it priced with which model,
    and the groups it published (the audit of ``GET /v1/pricings``)."""

    __tablename__ = "pricings"
    __table_args__ = (UniqueConstraint("tenant_id", "request_id", name="uq_pricings_tenant_request"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)  # the answer's priors_id
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    sender_id: Mapped[str] = mapped_column(String(200))
    sender_key_id: Mapped[str] = mapped_column(String(80))
    request_id: Mapped[str] = mapped_column(String(36))
    model_id: Mapped[str] = mapped_column(String(36))
    examples: Mapped[int] = mapped_column(BigInteger)  # requested
    priced: Mapped[int] = mapped_column(BigInteger)  # of them, given a group (the others had no features)
    groups: Mapped[int] = mapped_column(Integer)
    support_k: Mapped[int] = mapped_column(Integer)
    answer_sha256: Mapped[str] = mapped_column(String(64))  # of the answer's frames, as sent
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
