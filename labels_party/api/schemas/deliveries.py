"""Bodies of deliveries: one gRPC delivery of a stored message (a release's or a model's)."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, Field

from labels_party.storage.orm import Delivery


class DeliveryOut(BaseModel):
    id: str
    release_id: str
    recipient_id: str
    outcome: str = Field(
        description="`sending` (recorded before the recipient is dialled), `delivered`, `failed`, or "
        "`interrupted`: the labels party stopped before the recipient answered — the recipient may hold "
        "the release; delivering again sends the same bytes (free)"
    )
    attempts: int
    status: str
    detail: str
    receipt_sha256: str | None
    wire_bytes: int
    started_at: AwareDatetime
    finished_at: AwareDatetime | None

    @classmethod
    def of(cls, d: Delivery) -> DeliveryOut:
        return cls.model_validate(d, from_attributes=True)


class ModelDeliveryOut(BaseModel):
    model_id: str
    outcome: Literal["delivered"]
    attempts: int
    wire_bytes: int
