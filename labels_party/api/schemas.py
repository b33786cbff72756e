"""Request and response bodies of the labels-party API, and how rows become responses."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from labeldp.common.inputs import ExampleId, Name, Pem
from labeldp.mechanisms import LossName, PrivacyUnit, PublishedMechanism
from labels_party.budget.epsilon import as_delta, as_float
from labels_party.budget.service import DatasetBudget
from labels_party.datasets.spec import DatasetSpec
from labels_party.releases.limits import (
    MAX_BOUND,
    MAX_EPSILON,
    MAX_LISTED_EXAMPLES,
    MIN_EPSILON,
    MIN_EPSILON_PRIOR,
)
from labels_party.releases.service import Preview, ReleaseAudit, ReleaseRequest
from labels_party.semi_sensitive.service import SemiSensitiveRequest
from labels_party.storage.orm import Dataset, Delivery, LedgerEntry, Recipient, Release, SemiSensitiveModel


class RecipientIn(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "publisher",
                    "grpc_address": "publisher.example:8501",
                    "fingerprint": "ed25519:4b47bdb2497d2b734bb4f0663cb6c42a",
                }
            ]
        }
    )

    name: Name = Field(description="the features party's id (its party_id)")
    grpc_address: str | None = Field(
        None,
        max_length=300,
        pattern=r"^[^\x00-\x20\x7f]+:[0-9]{1,5}$",
        description="host:port of its gRPC receiver",
    )
    tls_ca_pem: Pem | None = Field(
        None, description="CA certificate (PEM) that signed its server certificate"
    )
    fingerprint: str | None = Field(
        None, max_length=80, pattern=r"^[!-~]+$", description="its Ed25519 key fingerprint (GET /v1/identity)"
    )


class RecipientOut(BaseModel):
    id: str
    name: str
    grpc_address: str | None
    fingerprint: str | None
    tls: bool
    created_at: AwareDatetime

    @classmethod
    def of(cls, r: Recipient) -> RecipientOut:
        return cls(
            id=r.id,
            name=r.name,
            grpc_address=r.grpc_address,
            fingerprint=r.fingerprint,
            tls=bool(r.tls_ca_pem),
            created_at=r.created_at,
        )


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
    started_at: AwareDatetime
    finished_at: AwareDatetime | None

    @classmethod
    def of(cls, d: Delivery) -> DeliveryOut:
        return cls.model_validate(d, from_attributes=True)


class DatasetIn(DatasetSpec):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "prices",
                    "label_type": "real",
                    "lo": 0,
                    "hi": 20000,
                    "support": {"kind": "uniform", "k": 201},
                },
                {"name": "conversions", "label_type": "count", "lo": 0, "hi": 52, "default_label": 0},
                {
                    "name": "purchases",
                    "label_type": "binary",
                    "lo": 0,
                    "hi": 1,
                    "semi_sensitive": [
                        {"name": "cart_adds", "kind": "number", "lo": 0, "hi": 100},
                        {"name": "remarketing_list", "kind": "category", "categories": ["none", "a", "b"]},
                    ],
                },
            ]
        }
    )

    name: Name


class DatasetOut(BaseModel):
    id: str
    name: str
    spec: dict[str, Any]
    support_size: int
    label_count: int
    universe_count: int | None
    universe_users: int | None = Field(
        None,
        description="users the universe declares (an example without a user_id is its own user); "
        "with a universe, the only source of each example's user",
    )
    created_at: AwareDatetime

    @classmethod
    def of(cls, ds: Dataset) -> DatasetOut:
        return cls(
            id=ds.id,
            name=ds.name,
            spec=ds.spec,
            support_size=DatasetSpec.model_validate(ds.spec).build_support().k,
            label_count=ds.label_count,
            universe_count=ds.universe_count,
            universe_users=ds.universe_users,
            created_at=ds.created_at,
        )


class UploadOut(BaseModel):
    rows: int
    clipped: int = 0
    label_count: int | None = None
    universe_count: int | None = None
    universe_users: int | None = None
    version: int


class ReleaseIn(BaseModel):
    model_config = ConfigDict(
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {"epsilon": 1, "recipient": "publisher", "loss": "squared"},
                {
                    "privacy_unit": "user",
                    "epsilon_user": 4,
                    "contribution_bound": "auto",
                    "recipient": "publisher",
                },
            ]
        },
    )

    privacy_unit: PrivacyUnit = Field(
        "example",
        description="example: ε protects each example's label; user: ε_user protects all of a user's labels",
    )
    epsilon: float | None = Field(
        None,
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        description="example-level: total ε charged to every example in the release",
    )
    epsilon_user: float | None = Field(
        None, ge=MIN_EPSILON, le=MAX_EPSILON, description="user-level: total ε charged to every user"
    )
    contribution_bound: Annotated[int, Field(ge=1, le=MAX_BOUND)] | Literal["auto", "private"] | None = Field(
        None,
        description="user-level: τ, the most examples per user that carry information; auto: chosen from "
        "the noisy prior and the examples per user (docs/math.md §10); private: an ε-DP quantile of "
        "examples per user",
    )
    epsilon_bound: float | None = Field(
        None,
        ge=MIN_EPSILON_PRIOR,
        description="user-level, contribution_bound private: the part of epsilon_user spent choosing τ "
        "(default a tenth)",
    )
    epsilon_prior: float | None = Field(
        None,
        ge=MIN_EPSILON_PRIOR,
        description="part of ε for the private prior (less than epsilon); default min(ε/2, √(k/n))",
    )
    loss: LossName | None = Field(
        None,
        description="the loss the mechanism is optimized for (zero_one: classes); "
        "default: squared, or zero_one for categorical labels",
    )
    recipient: Name = Field(description="name of a registered recipient (features party)")
    example_ids: list[ExampleId] | None = Field(
        None,
        min_length=1,
        max_length=MAX_LISTED_EXAMPLES,
        description="release only these IDs (default: all)",
    )

    @model_validator(mode="after")
    def _one_unit(self) -> Self:
        if self.privacy_unit == "example":
            if self.epsilon is None:
                raise ValueError("an example-level release needs epsilon")
            if self.epsilon_user is not None or self.contribution_bound is not None or self.epsilon_bound:
                raise ValueError("epsilon_user, contribution_bound and epsilon_bound need privacy_unit user")
        else:
            if self.epsilon_user is None or self.contribution_bound is None:
                raise ValueError("a user-level release needs epsilon_user and contribution_bound")
            if self.epsilon is not None:
                raise ValueError("a user-level release states epsilon_user, not epsilon")
            if self.epsilon_bound is not None and self.contribution_bound != "private":
                raise ValueError("epsilon_bound is for contribution_bound private only")
        return self

    def request(self) -> ReleaseRequest:
        epsilon = self.epsilon if self.privacy_unit == "example" else self.epsilon_user
        assert epsilon is not None  # _one_unit
        return ReleaseRequest(
            epsilon,
            self.loss,
            self.recipient,
            self.epsilon_prior,
            self.example_ids,
            self.privacy_unit,
            self.contribution_bound,
            self.epsilon_bound,
        )


class ReleaseOut(BaseModel):
    id: str
    dataset_id: str
    status: str
    recipient_id: str
    privacy_unit: PrivacyUnit
    epsilon: float = Field(
        description="ε charged to each charged example (user-level: the most any can spend)"
    )
    epsilon_charged_micro: int
    epsilon_user: float | None = Field(description="user-level: ε charged to every user in the release")
    contribution_bound: str | None = Field(description="user-level: τ as asked (a number, auto or private)")
    users: int | None = Field(description="user-level: how many users the release covers")
    examples_capped: int | None = Field(
        description="user-level, once complete: examples over the bound (listed, no label information)"
    )
    epsilon_prior: float
    loss: str
    examples: int
    examples_defaulted: int
    universe_declared: bool
    bins: list[float] | None = Field(description="the bins' output values (mechanism.bin_values)")
    expected_loss_under_noisy_prior: float | None
    mechanism: PublishedMechanism | None = Field(description="the published mechanism, once complete")
    worst_case_additive_advantage: float | None = Field(
        description="once complete: how much more often than before the best attacker, whatever it "
        "believes, guesses a label's bin (class) after seeing its released bin (h − 1/m)"
    )
    max_multiplicative_advantage: float | None = Field(
        description="once complete: the most one released bin moves an attacker's log-odds between "
        "two labels (the implemented ε)"
    )
    error: str | None
    created_at: AwareDatetime
    completed_at: AwareDatetime | None

    @classmethod
    def of(cls, r: Release) -> ReleaseOut:
        mechanism = PublishedMechanism.model_validate(r.mechanism) if r.mechanism else None
        return cls(
            id=r.id,
            dataset_id=r.dataset_id,
            status=r.status,
            recipient_id=r.recipient_id,
            privacy_unit="user" if r.privacy_unit == "user" else "example",
            epsilon=as_float(r.epsilon_micro),
            epsilon_charged_micro=r.epsilon_micro,
            epsilon_user=as_float(r.epsilon_user_micro) if r.epsilon_user_micro is not None else None,
            contribution_bound=r.contribution_bound,
            users=r.users,
            examples_capped=r.examples_capped,
            epsilon_prior=r.epsilon_prior,
            loss=r.loss,
            examples=r.examples,
            examples_defaulted=r.examples_defaulted,
            universe_declared=r.universe_declared,
            bins=list(mechanism.bin_values) if mechanism else None,
            expected_loss_under_noisy_prior=mechanism.expected_loss_under_prior() if mechanism else None,
            mechanism=mechanism,
            worst_case_additive_advantage=mechanism.worst_case_additive_advantage if mechanism else None,
            max_multiplicative_advantage=mechanism.max_multiplicative_advantage if mechanism else None,
            error=r.error,
            created_at=r.created_at,
            completed_at=r.completed_at,
        )


class AuditOut(BaseModel):
    """A release's privacy audit with the raw labels: tenant-only, free, never logged."""

    release_id: str
    examples: int = Field(description="examples audited (user-level: those within the bound)")
    worst_case_additive_advantage: float = Field(description="over every prior the attacker could hold")
    max_multiplicative_advantage: float = Field(description="the implemented ε")
    true_distribution: dict[str, float] = Field(
        description="exact numbers for an attacker who knows the true label histogram of these examples "
        "(stronger than the recipient, who has the noisy prior): additive_mean (its advantage), "
        "success_without_mean / success_with_mean, share_trusting_noisy_label, multiplicative_max, and "
        "for regression mse_reduction_share (the part of its squared error the release removes)"
    )
    realized: dict[str, float] = Field(
        description="that attacker's accuracy on this release's actual outputs, without and with them"
    )

    @classmethod
    def of(cls, a: ReleaseAudit) -> AuditOut:
        return cls.model_validate(a, from_attributes=True)


class PreviewIn(ReleaseIn):
    prior_release_id: str | None = Field(
        None,
        max_length=64,
        description="use the noisy prior an earlier release of this dataset published (free post-processing)",
    )
    public_prior: list[float] | None = Field(
        None, max_length=10_000, description="use a prior known from elsewhere: one mass per support point"
    )


class PreviewOut(BaseModel):
    epsilon: float
    epsilon_prior: float
    examples: int
    prior_source: Literal["labels", "release", "public"] = Field(
        description="labels: the exact histogram of the raw labels (tenant-only; choices tuned on it "
        "depend on the labels); release: an earlier release's noisy prior; public: the given prior"
    )
    m: int
    bin_values: list[float]
    bin_edges: list[tuple[float, float]]
    expected_loss: float = Field(description="under the prior named by prior_source (tenant-only)")
    mechanism: PublishedMechanism

    @classmethod
    def of(cls, p: Preview) -> PreviewOut:
        return cls(
            epsilon=p.epsilon,
            epsilon_prior=p.epsilon_prior,
            examples=p.examples,
            prior_source=p.prior_source,
            m=p.mechanism.m,
            bin_values=list(p.mechanism.bin_values),
            bin_edges=p.mechanism.bin_edges,
            expected_loss=p.expected_loss,
            mechanism=p.mechanism,
        )


class UserBudgetOut(BaseModel):
    per_user_budget: float | None = Field(description="None: per-user spend is recorded, not limited")
    users: int = Field(
        description="users the dataset's examples belong to (an example without user_id is one)"
    )
    spent: dict[str, float] = Field(description="per-user spend over these users: p50, p90, p99, max")
    epsilon_user_asked: float
    can_take: int | None = Field(description="users that could still take epsilon_user (None: no limit)")


class BudgetOut(BaseModel):
    per_example_budget: float
    examples: int
    max_spent: float
    min_spent: float
    epsilon_asked: float
    can_take: int
    users: UserBudgetOut
    delta_budget: float = Field(description="the tenant's δ budget over all (ε, δ) releases (0: pure ε only)")
    delta_spent: float = Field(description="δ taken by (ε, δ) releases so far, tenant-wide")

    @classmethod
    def of(cls, b: DatasetBudget, epsilon: float, epsilon_user: float) -> BudgetOut:
        u = b.users
        return cls(
            per_example_budget=as_float(b.budget_micro),
            examples=b.summary.examples,
            max_spent=as_float(b.summary.max_spent_micro),
            min_spent=as_float(b.summary.min_spent_micro),
            epsilon_asked=epsilon,
            can_take=b.summary.can_take,
            users=UserBudgetOut(
                per_user_budget=as_float(b.user_budget_micro) if b.user_budget_micro is not None else None,
                users=u.users,
                spent={name: as_float(v) for name, v in u.spent_quantiles_micro.items()},
                epsilon_user_asked=epsilon_user,
                can_take=u.can_take,
            ),
            delta_budget=as_delta(b.delta_budget_atto),
            delta_spent=as_delta(b.delta_spent_atto),
        )


class LedgerEntryOut(BaseModel):
    id: int
    kind: str
    release_id: str | None
    epsilon: float
    epsilon_micro: int
    examples: int
    users: int = Field(description="charges: how many users were charged")
    user_epsilon: float | None = Field(description="charges: the most any one user was charged")
    delta: float | None = Field(
        None, description="(ε, δ) charges: the δ taken; delta_budget_set: the new budget"
    )
    api_key_id: str | None
    note: str
    created_at: AwareDatetime

    @classmethod
    def of(cls, e: LedgerEntry) -> LedgerEntryOut:
        return cls(
            id=e.id,
            kind=e.kind,
            release_id=e.release_id,
            epsilon=as_float(e.epsilon_micro),
            epsilon_micro=e.epsilon_micro,
            examples=e.examples,
            users=e.users or 0,
            user_epsilon=as_float(e.user_epsilon_micro) if e.user_epsilon_micro is not None else None,
            delta=as_delta(e.delta_atto) if e.delta_atto is not None else None,
            api_key_id=e.api_key_id,
            note=e.note,
            created_at=e.created_at,
        )


class SemiSensitiveModelIn(BaseModel):
    model_config = ConfigDict(
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
    epsilon_dpsgd: float = Field(
        ge=MIN_EPSILON, le=MAX_EPSILON, description="ε₂ of the DP-SGD phase, per example"
    )
    delta: float = Field(
        gt=0, lt=1e-3, description="δ of the DP-SGD phase (taken from the tenant's δ budget)"
    )
    epochs: float = Field(3.0, gt=0, le=100, description="DP-SGD epochs (expected passes over the examples)")
    batch_size: int = Field(1024, ge=1, le=1 << 20, description="expected batch size (Poisson sampling)")
    clip_norm: float = Field(1.0, gt=0, le=1e4, description="per-example gradient norm bound C")
    learning_rate: float = Field(1e-2, gt=0, le=1, description="Adam learning rate of the DP-SGD phase")
    label_epochs: float = Field(3.0, gt=0, le=100, description="epochs of the label phase (post-processing)")
    width: int = Field(32, ge=1, le=256, description="units per tower and in the head")

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


class ModelDeliveryOut(BaseModel):
    model_id: str
    outcome: Literal["delivered"]
    attempts: int
    wire_bytes: int
