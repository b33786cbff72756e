"""Request and response bodies of the features-party API, and how rows become responses."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from features_party.receiver.store import grouping, published_mechanism
from features_party.storage.orm import (
    FeatureTable,
    Pricing,
    PricingGrant,
    ReceivedModel,
    ReceivedRelease,
    Sender,
    TrainingJob,
)
from features_party.tables.joins import JoinReport
from features_party.training.service import MAX_ALSO_RELEASES, TrainingRequest
from labeldp.common.inputs import ExampleId, Name, Pem
from labeldp.mechanisms import PublishedMechanism


class IdentityOut(BaseModel):
    party_id: str
    key_id: str
    public_key_pem: str
    grpc_port: int
    tenant_id: str = Field(
        description="the calling tenant's id: a labels party registers it as the recipient's "
        "`recipient_tenant`, and its messages then name it, so they are filed for this tenant alone"
    )


class SenderIn(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, never silently ignored

    id: Name = Field(description="the labels party's party_id")
    public_key_pem: Pem = Field(description="its Ed25519 public key (its GET /v1/identity)")


class SenderOut(BaseModel):
    id: str
    key_id: str
    created_at: AwareDatetime

    @classmethod
    def of(cls, s: Sender) -> SenderOut:
        return cls.model_validate(s, from_attributes=True)


class ReceivedReleaseOut(BaseModel):
    release_id: str
    sender_id: str
    sender_key_id: str
    example_count: int
    chunk_count: int
    payload_sha256: str
    received_at: AwareDatetime
    mechanism: PublishedMechanism = Field(description="the published mechanism, as signed by the sender")
    worst_case_additive_advantage: float = Field(
        description="how much more often than before the best attacker, whatever it believes, guesses a "
        "label's bin (class) from its released bin: h − 1/m of the mechanism"
    )
    max_multiplicative_advantage: float = Field(
        description="the most one released bin moves an attacker's log-odds between two labels: implemented ε"
    )
    keep_probability: float | None = Field(
        description="the bin transition P(released bin j | the label's bin i) is keep_probability on the "
        "diagonal and move_probability off it (null for the unbiased randomizer: its rows are in "
        "mechanism.base_weights and the windows)"
    )
    move_probability: float | None
    priors_id: str | None = Field(
        description="a feature-aware release: the labels party's priors its groups came from (null: none)"
    )
    group_count: int = Field(
        description="a feature-aware release: how many groups it randomized with a mechanism of their own "
        "(0: every example by `mechanism`)"
    )
    header: dict[str, Any] = Field(
        description="the signed header's other fields (for audit; the groups' mechanisms counted, not listed)"
    )

    @classmethod
    def of(cls, r: ReceivedRelease) -> ReceivedReleaseOut:
        mechanism = published_mechanism(r)
        return cls(
            release_id=r.release_id,
            sender_id=r.sender_id,
            sender_key_id=r.sender_key_id,
            example_count=r.example_count,
            chunk_count=r.chunk_count,
            payload_sha256=r.payload_sha256,
            received_at=r.received_at,
            mechanism=mechanism,
            worst_case_additive_advantage=mechanism.worst_case_additive_advantage,
            max_multiplicative_advantage=mechanism.max_multiplicative_advantage,
            keep_probability=None if mechanism.kind == "unbiased" else mechanism.threshold.keep_probability,
            move_probability=None if mechanism.kind == "unbiased" else mechanism.threshold.move_probability,
            priors_id=grouping(r)[0],
            group_count=grouping(r)[1],
            header=r.summary,
        )


class FeatureTableOut(BaseModel):
    name: str
    version: int
    rows: int
    schema_: dict[str, str] = Field(alias="schema", serialization_alias="schema")
    non_sensitive: list[str] = Field(description="columns declared exportable for semi-sensitive training")
    updated_at: AwareDatetime

    @classmethod
    def of(cls, t: FeatureTable) -> FeatureTableOut:
        return cls(
            name=t.name,
            version=t.version,
            rows=t.rows,
            schema=t.schema,
            non_sensitive=list(t.non_sensitive or []),
            updated_at=t.updated_at,
        )


class JoinIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={
            "examples": [{"release_id": "0c65852a-c874-4cdc-ade5-053ad195b61d", "feature_table": "diamonds"}]
        },
    )

    release_id: str = Field(max_length=64)
    feature_table: Name


class JoinOut(BaseModel):
    release_id: str
    feature_table: str
    release_examples: int
    feature_rows: int
    in_both: int
    only_in_release: int
    only_in_features: int
    release_match_rate: float
    feature_match_rate: float

    @classmethod
    def of(cls, body: JoinIn, report: JoinReport) -> JoinOut:
        return cls(
            release_id=body.release_id,
            feature_table=body.feature_table,
            release_match_rate=report.release_match_rate,
            feature_match_rate=report.feature_match_rate,
            **asdict(report),
        )


class TrainingJobIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={
            "examples": [
                {
                    "release_id": "0c65852a-c874-4cdc-ade5-053ad195b61d",
                    "feature_table": "diamonds",
                    "model": "hgb",
                    "debias": "affine",
                }
            ]
        },
    )

    release_id: str = Field(max_length=64)
    feature_table: Name
    model: Literal["hgb", "linear", "lightgbm"] = Field(
        "hgb",
        description="hgb: gradient boosting in this process; linear: ridge/Poisson/logistic; lightgbm: "
        "LightGBM on the configured Dask cluster (regression releases)",
    )
    debias: Literal["none", "affine", "unbiased"] = Field(
        "affine",
        description="how an RR release's noisy values are corrected; a release of the unbiased randomizer "
        "needs none (its outputs' mean is the label): it trains as none and the model records none",
    )
    validation_fraction: float = Field(0.2, gt=0, lt=1)
    also_release_ids: list[Annotated[str, Field(max_length=64)]] = Field(
        [],
        max_length=MAX_ALSO_RELEASES,
        description="train on these received releases too (the same labels' type, loss and support; "
        "regression): each row debiased by the mechanism that released it — e.g. both stages of a "
        "feature-aware loop (docs/concepts/feature-aware.md)",
    )

    def request(self) -> TrainingRequest:
        return TrainingRequest(
            self.release_id,
            self.feature_table,
            self.model,
            self.debias,
            self.validation_fraction,
            tuple(self.also_release_ids),
        )


class JobOut(BaseModel):
    id: str
    status: str = Field(description="queued, running, succeeded or failed")
    progress: dict[str, Any]
    error: str | None
    created_at: AwareDatetime
    finished_at: AwareDatetime | None

    @classmethod
    def of(cls, j: TrainingJob) -> JobOut:
        return cls.model_validate(j, from_attributes=True)


class ModelOut(BaseModel):
    id: str
    status: str
    model: str
    debias: str
    loss: str
    metrics: dict[str, Any]
    provenance: dict[str, Any]
    error: str | None
    created_at: AwareDatetime

    @classmethod
    def of(cls, j: TrainingJob) -> ModelOut:
        return cls(
            id=j.id,
            status=j.status,
            model=j.kind,
            debias=j.debias,
            loss=j.loss,
            metrics=j.metrics,
            provenance={k: v for k, v in j.provenance.items() if k != "feature_table_id"},
            error=j.error,
            created_at=j.created_at,
        )


MAX_PREDICTIONS = 100_000  # per request; larger sets are a batch job, not a request


class PredictIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={
            "examples": [
                {"example_ids": ["click-1", "click-2"]},
                {"rows": [{"carat": 0.23, "cut": "Ideal", "color": "E", "clarity": "SI2", "depth": 61.5}]},
            ]
        },
    )

    example_ids: list[ExampleId] | None = Field(
        None,
        min_length=1,
        max_length=MAX_PREDICTIONS,
        description="rows of a feature table (default: the model's)",
    )
    feature_table: Name | None = None
    rows: list[dict[str, Any]] | None = Field(
        None, min_length=1, max_length=MAX_PREDICTIONS, description="feature rows given directly"
    )


class ReceivedModelOut(BaseModel):
    model_id: str
    sender_id: str
    sender_key_id: str
    message_sha256: str
    label_release_id: str | None = Field(description="the label release of the first phase; null: none")
    guarantee: dict[str, Any] = Field(
        description="as signed: ε₁ of the label phase, ε₂ and δ of DP-SGD, adjacency, accountant, σ, q, steps"
    )
    columns: dict[str, Any] = Field(
        description="the non-sensitive and semi-sensitive columns the model reads"
    )
    received_at: AwareDatetime

    @classmethod
    def of(cls, m: ReceivedModel) -> ReceivedModelOut:
        return cls.model_validate(m, from_attributes=True)


class PricingGrantIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
        json_schema_extra={
            "examples": [{"model_id": "0b9c6e1a-3f2d-4c5b-8a79-6e5d4c3b2a19", "max_groups": 64}]
        },
    )

    model_id: str = Field(
        max_length=36,
        description="one of this tenant's complete models (GET /v1/models): it prices the examples",
    )
    max_groups: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="the most groups an answer may have (default: as many as asked, ≤ 1,024)",
    )


class PricingGrantOut(BaseModel):
    sender_id: str
    model_id: str
    max_groups: int | None
    created_at: AwareDatetime
    updated_at: AwareDatetime

    @classmethod
    def of(cls, g: PricingGrant) -> PricingGrantOut:
        return cls.model_validate(g, from_attributes=True)


class PricingOut(BaseModel):
    id: str = Field(description="the answer's priors_id (the labels party stores it as features_priors_id)")
    sender_id: str
    request_id: str
    model_id: str
    examples: int = Field(description="example IDs the request listed")
    priced: int = Field(description="of them, given a group (the others have no feature row)")
    groups: int = Field(description="G: group priors the answer published")
    support_k: int
    answer_sha256: str = Field(description="SHA-256 of the signed answer's frames, as sent")
    created_at: AwareDatetime

    @classmethod
    def of(cls, p: Pricing) -> PricingOut:
        return cls.model_validate(p, from_attributes=True)
