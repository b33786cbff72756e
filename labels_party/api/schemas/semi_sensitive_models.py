"""Bodies of training with semi-sensitive features (docs/semi-sensitive.md)."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictFloat

from labeldp.common.inputs import WholeNumber
from labels_party.budget.epsilon import as_delta, as_float
from labels_party.releases.limits import (
    MAX_EPSILON,
    MIN_EPSILON,
)
from labels_party.semi_sensitive.plan import SemiSensitiveRequest
from labels_party.storage.orm import SemiSensitiveModel


class SemiSensitiveModelIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "label_release_id": "6f1c1b2e-8d6a-4f53-9a57-0d8e7b0f4a21",
                    "epsilon_dpsgd": 2,
                    "delta": 1e-9,
                }
            ]
        },
    )

    label_release_id: str = Field(max_length=36, description="the phase-1 label release (ε₁) to start from")
    epsilon_dpsgd: StrictFloat = Field(
        ge=MIN_EPSILON, le=MAX_EPSILON, description="ε₂ of the DP-SGD phase, per example"
    )
    delta: StrictFloat = Field(
        gt=0, lt=1e-3, description="δ of the DP-SGD phase (taken from the tenant's δ budget)"
    )
    epochs: StrictFloat = Field(
        3.0, gt=0, le=100, description="DP-SGD epochs (expected passes over the examples)"
    )
    batch_size: WholeNumber = Field(
        1024, ge=1, le=1 << 20, description="expected batch size (Poisson sampling)"
    )
    clip_norm: StrictFloat = Field(1.0, gt=0, le=1e4, description="per-example gradient norm bound C")
    learning_rate: StrictFloat = Field(1e-2, gt=0, le=1, description="Adam learning rate of the DP-SGD phase")
    label_epochs: StrictFloat = Field(
        3.0, gt=0, le=100, description="epochs of the label phase (post-processing)"
    )
    width: WholeNumber = Field(32, ge=1, le=256, description="units per tower and in the head")

    def request(self) -> SemiSensitiveRequest:
        return SemiSensitiveRequest(**self.model_dump())


class SemiSensitiveModelOut(BaseModel):
    id: str
    dataset_id: str
    label_release_id: str
    status: str
    examples: int
    epsilon_dpsgd: float
    delta: float
    noise_multiplier: float
    sampling_rate: float
    steps: int
    clip_norm: float
    message_sha256: str | None
    error: str | None
    created_at: AwareDatetime
    completed_at: AwareDatetime | None

    @classmethod
    def of(cls, m: SemiSensitiveModel) -> SemiSensitiveModelOut:
        return cls(
            id=m.id,
            dataset_id=m.dataset_id,
            label_release_id=m.label_release_id,
            status=m.status,
            examples=m.examples,
            epsilon_dpsgd=as_float(m.epsilon_dpsgd_micro),
            delta=as_delta(m.delta_atto),
            noise_multiplier=m.noise_multiplier,
            sampling_rate=m.sampling_rate,
            steps=m.steps,
            clip_norm=m.clip_norm,
            message_sha256=m.message_sha256,
            error=m.error,
            created_at=m.created_at,
            completed_at=m.completed_at,
        )
