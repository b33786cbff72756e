"""Request and response bodies of the labels-party API."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from labels_party.datasets.spec import DatasetSpec


class RecipientIn(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="the features party's id (its party_id)")
    grpc_address: str | None = Field(None, max_length=300, description="host:port of its gRPC receiver")
    tls_ca_pem: str | None = Field(
        None, description="CA certificate (PEM) that signed its server certificate"
    )
    fingerprint: str | None = Field(
        None, max_length=80, description="its Ed25519 key fingerprint (GET /v1/identity)"
    )


class RecipientOut(BaseModel):
    id: str
    name: str
    grpc_address: str | None
    fingerprint: str | None
    tls: bool
    created_at: datetime


class IdentityOut(BaseModel):
    party_id: str
    key_id: str
    public_key_pem: str


class DeliveryOut(BaseModel):
    id: str
    release_id: str
    recipient_id: str
    outcome: str
    attempts: int
    status: str
    detail: str
    receipt_sha256: str | None
    wire_bytes: int
    started_at: datetime
    finished_at: datetime | None


class DatasetIn(DatasetSpec):
    name: str = Field(min_length=1, max_length=200)


class DatasetOut(BaseModel):
    id: str
    name: str
    spec: dict[str, Any]
    support_size: int
    label_count: int
    universe_count: int | None
    created_at: datetime


class UploadOut(BaseModel):
    rows: int
    clipped: int = 0
    label_count: int | None = None
    universe_count: int | None = None
    version: int


class ReleaseIn(BaseModel):
    epsilon: float = Field(gt=0, le=100, description="total ε charged to every example in the release")
    epsilon_prior: float | None = Field(
        None, gt=0, description="part of ε for the private prior; default √(k/n)"
    )
    loss: Literal["squared", "absolute", "poisson", "zero_one"] = "squared"
    recipient: str = Field(min_length=1, description="name of a registered recipient (features party)")
    example_ids: list[str] | None = Field(None, description="release only these IDs (default: all)")


class ReleaseOut(BaseModel):
    id: str
    dataset_id: str
    status: str
    recipient_id: str
    epsilon: float
    epsilon_charged_micro: int
    epsilon_prior: float
    loss: str
    examples: int
    bins: list[float] | None
    expected_loss_under_noisy_prior: float | None
    mechanism: dict[str, Any] | None
    error: str | None
    created_at: datetime
    completed_at: datetime | None


class BudgetOut(BaseModel):
    per_example_budget: float
    examples: int
    max_spent: float
    min_spent: float
    epsilon_asked: float
    can_take: int


class LedgerEntryOut(BaseModel):
    id: int
    kind: str
    release_id: str | None
    epsilon: float
    epsilon_micro: int
    examples: int
    api_key_id: str | None
    note: str
    created_at: datetime


class Page(BaseModel):
    items: list[Any]
    next_offset: int | None
