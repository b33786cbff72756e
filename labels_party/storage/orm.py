"""SQL tables of the labels party: tenants and keys, the budget ledger, datasets and releases.

Bulk data (labels, noisy bin indices) lives in Parquet files under the data directory; these tables
hold metadata and the ledger. Changes go through Alembic migrations in ``storage/migrations``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
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


class ChargedJob:
    """What every job that charges the budget records (a release, a semi-sensitive model): its
    idempotency key and request digest, its state, and the process working on it. The row and its
    charge commit together; the work then runs under its owner's lease, and a live process fails a
    job whose owner is gone, keeping its charge (``labels_party/budget/charged_work.py``)."""

    idempotency_key: Mapped[str] = mapped_column(String(200))
    request_hash: Mapped[str] = mapped_column(String(64))
    # the request as resolved (defaults applied), to name what a reused key's request changed
    request: Mapped[dict[str, object] | None] = mapped_column(JSON, nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # charged | complete | failed
    api_key_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    # the process doing the charged work, and until when its heartbeat vouches for it
    owner: Mapped[str | None] = mapped_column(String(120), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    id: Mapped[str]
    tenant_id: Mapped[str]
    examples: Mapped[int]

    @property
    def charged_micro(self) -> int:
        """The ε each example was charged (what a kept charge records)."""
        raise NotImplementedError


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    # per-example budget in integer micro-ε; every change is also a ledger entry
    budget_micro: Mapped[int] = mapped_column(BigInteger)
    # per-user budget in micro-ε (None: per-user spend is recorded but not limited)
    user_budget_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # bumped by every change to the tenant's spend or budgets: a partitioned charge, computed without
    # a lock, commits only if it still holds the version it read (budget/partitioned.py)
    ledger_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # δ in integer atto-δ (10⁻¹⁸): a tenant-wide budget and what (ε, δ) charges have taken of it, an
    # upper bound on every example's δ (docs/semi-sensitive.md)
    delta_budget_atto: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    delta_spent_atto: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # SHA-256 of the bearer key
    prefix: Mapped[str] = mapped_column(String(16))  # shown in the ledger to say which key acted
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class LedgerEntry(Base):
    """Append-only: charges, kept charges of failed releases, budget changes."""

    __tablename__ = "ledger_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(32))  # charge | charge_kept | budget_set
    release_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    examples: Mapped[int] = mapped_column(BigInteger, default=0)
    users: Mapped[int] = mapped_column(BigInteger, default=0)  # users charged (charges since 0007)
    user_epsilon_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # most any user paid
    delta_atto: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # δ charged, or δ budget set
    api_key_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    note: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ExampleSpendShard(Base):
    """Micro-ε spent per (tenant, example), stored column-wise: the tenant's examples are split into
    256 shards by the top byte of their 64-bit key, and each shard holds two little-endian int64
    arrays, the sorted keys and their spend. A charge of a million examples then reads and writes
    a few megabytes instead of updating a million rows and their index entries. A partitioned charge
    (``budget/partitioned.py``) moves a shard's arrays into an immutable segment file instead, so a
    billion examples never pass through the database.

    Keys are 64-bit hashes of the example IDs (``budget/ledger_keys.py``): a collision can only make two
    examples share one counter (over-charging, never under-charging), and re-uploading the same IDs
    under another dataset finds the same counters."""

    __tablename__ = "example_spend_shards"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    keys: Mapped[bytes] = mapped_column(LargeBinary)  # empty while the shard lives in a segment file
    spent: Mapped[bytes] = mapped_column(LargeBinary)
    # an immutable segment file under the ledger directory (``budget/segments.py``) and its SHA-256
    segment: Mapped[str | None] = mapped_column(String(120), nullable=True)
    segment_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


class UserSpendShard(Base):
    """Micro-ε spent per (tenant, user), stored like ``ExampleSpendShard``. Users are keyed by a 64-bit
    hash of their ``user_id`` (an example without one is its own user, keyed by its example key), so
    one person's spend accumulates across every dataset and release of the tenant."""

    __tablename__ = "user_spend_shards"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    keys: Mapped[bytes] = mapped_column(LargeBinary)  # empty while the shard lives in a segment file
    spent: Mapped[bytes] = mapped_column(LargeBinary)
    # an immutable segment file under the ledger directory (``budget/segments.py``) and its SHA-256
    segment: Mapped[str | None] = mapped_column(String(120), nullable=True)
    segment_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


SpendShard = type[ExampleSpendShard] | type[UserSpendShard]


class Recipient(Base):
    """A features party this tenant may release to (transport details are added with delivery)."""

    __tablename__ = "recipients"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))  # the features party's id (the message's recipient_id)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    grpc_address: Mapped[str | None] = mapped_column(String(300), nullable=True)
    tls_ca_pem: Mapped[str | None] = mapped_column(Text, nullable=True)
    fingerprint: Mapped[str | None] = mapped_column(String(80), nullable=True)
    # its tenant at the features party, named (signed) in every message to it; None: named in none
    recipient_tenant: Mapped[str | None] = mapped_column(String(36), nullable=True)


class Delivery(Base):
    """One delivery of a release's stored message (re-deliveries send the same bytes, spend nothing):
    recorded ``sending`` before the recipient is dialled, completed after; one whose sender is gone
    before it completed is recorded ``interrupted`` by recovery."""

    __tablename__ = "deliveries"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    release_id: Mapped[str] = mapped_column(ForeignKey("releases.id"), index=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    recipient_id: Mapped[str] = mapped_column(ForeignKey("recipients.id"))
    outcome: Mapped[str] = mapped_column(String(16))  # sending | delivered | failed | interrupted
    owner: Mapped[str | None] = mapped_column(String(120), nullable=True)  # the sending process's token
    attempts: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(40))  # the final gRPC status code name
    detail: Mapped[str] = mapped_column(Text, default="")
    receipt_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    wire_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Dataset(Base):
    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_datasets_tenant_name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, object]] = mapped_column(JSON)  # label type, bounds, support, policies
    labels_version: Mapped[int] = mapped_column(Integer, default=0)
    label_count: Mapped[int] = mapped_column(BigInteger, default=0)
    universe_version: Mapped[int] = mapped_column(Integer, default=0)
    universe_count: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # users the universe declares (an example without a user_id is its own); None: no universe
    universe_users: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # the features party's non-sensitive rows for the DP-SGD phase (docs/semi-sensitive.md)
    non_sensitive_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SemiSensitiveModel(ChargedJob, Base):
    """A model trained with semi-sensitive features: the row and its (ε₂, δ) charge commit together
    before any noise; the signed model message is written afterwards (status ``complete``). A run
    that fails after its charge, or whose owner dies, keeps the charge (status ``failed``)."""

    __tablename__ = "semi_sensitive_models"
    __table_args__ = (UniqueConstraint("tenant_id", "idempotency_key", name="uq_models_tenant_key"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    label_release_id: Mapped[str | None] = mapped_column(
        ForeignKey("releases.id"), nullable=True
    )  # None: no label phase
    # whom the model message is addressed to (the label release's recipient when there is one); rows
    # from before it have None and their release's recipient
    recipient_id: Mapped[str | None] = mapped_column(ForeignKey("recipients.id"), nullable=True)
    examples: Mapped[int] = mapped_column(BigInteger)
    epsilon_dpsgd_micro: Mapped[int] = mapped_column(BigInteger)
    delta_atto: Mapped[int] = mapped_column(BigInteger)
    noise_multiplier: Mapped[float] = mapped_column(Float)
    sampling_rate: Mapped[float] = mapped_column(Float)
    steps: Mapped[int] = mapped_column(BigInteger)
    clip_norm: Mapped[float] = mapped_column(Float)
    message_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)

    @property
    def charged_micro(self) -> int:
        return self.epsilon_dpsgd_micro


class Release(ChargedJob, Base):
    """One privatized release. The row and its ledger charge commit in one transaction; the noisy
    output is written afterwards (status ``complete``). A release left ``charged`` by a crash is
    marked ``failed`` by recovery and keeps its charge: noise may already have been drawn."""

    __tablename__ = "releases"
    __table_args__ = (UniqueConstraint("tenant_id", "idempotency_key"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    recipient_id: Mapped[str] = mapped_column(ForeignKey("recipients.id"))
    epsilon_micro: Mapped[int] = mapped_column(BigInteger)
    epsilon_prior: Mapped[float] = mapped_column(Float)
    loss: Mapped[str] = mapped_column(String(16))
    examples: Mapped[int] = mapped_column(BigInteger)
    # the PublishedMechanism (labeldp.mechanisms.published) as JSON, once the release is complete
    mechanism: Mapped[dict[str, object] | None] = mapped_column(JSON, nullable=True)
    examples_defaulted: Mapped[int] = mapped_column(BigInteger, default=0)  # universe IDs without a label
    universe_declared: Mapped[bool] = mapped_column(Boolean, default=False)
    # user-level releases: the ε per user, the bound as asked ("3", "auto", "private"), how many users
    privacy_unit: Mapped[str] = mapped_column(String(16), default="example")
    epsilon_user_micro: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    contribution_bound: Mapped[str | None] = mapped_column(String(16), nullable=True)
    users: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    examples_capped: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # set on completion
    # a feature-aware release: the stored priors it used (``labels_party/priors``); no foreign key, so
    # that priors can be deleted once no running release needs them while the release keeps the record
    priors_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)

    @property
    def charged_micro(self) -> int:
        return self.epsilon_micro


class Priors(Base):
    """Priors a features party signed for examples of a dataset (``labels_party/priors``): each
    example's group and each group's prior on the support. The files under ``priors/`` (the groups in
    request order, the G × k priors and the signed answer as received) are written before the row
    commits and removed after it is deleted."""

    __tablename__ = "priors"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    recipient_id: Mapped[str] = mapped_column(ForeignKey("recipients.id"))
    features_priors_id: Mapped[str] = mapped_column(String(36))  # the features party's id of its answer
    request_id: Mapped[str] = mapped_column(String(36))
    model_id: Mapped[str] = mapped_column(String(36))  # the features party's model that priced them
    rule: Mapped[str] = mapped_column(Text)
    loss: Mapped[str] = mapped_column(String(16))
    groups: Mapped[int] = mapped_column(Integer)  # G
    max_groups: Mapped[int] = mapped_column(Integer)
    support_k: Mapped[int] = mapped_column(Integer)
    examples_requested: Mapped[int] = mapped_column(BigInteger)
    examples_priced: Mapped[int] = mapped_column(BigInteger)  # given a group
    message_sha256: Mapped[str] = mapped_column(String(64))  # of the signed answer's frames
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


Index("ix_ledger_tenant_created", LedgerEntry.tenant_id, LedgerEntry.created_at)
