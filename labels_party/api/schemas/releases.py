"""Bodies of releases: the request (validated before anything is charged), the release, its free
preview and its tenant-only audit."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

from labeldp.common.inputs import UUID_PATTERN, ExampleId, Integral, Name
from labeldp.mechanisms import (
    DEFAULT_MODEL_CAPACITY,
    LossName,
    MechanismKind,
    ObjectiveName,
    PriorsVerdict,
    PrivacyUnit,
    PublishedMechanism,
)
from labeldp.mechanisms.empirical import EpsilonBound
from labeldp.mechanisms.objective import MAX_MODEL_CAPACITY
from labels_party.budget.epsilon import as_float
from labels_party.releases.limits import (
    MAX_BOUND,
    MAX_EPSILON,
    MAX_LISTED_EXAMPLES,
    MIN_EPSILON,
    MIN_EPSILON_PRIOR,
)
from labels_party.releases.service import Preview, ReleaseAudit, ReleaseRequest
from labels_party.storage.orm import Release

BIN_TRANSITION = (
    "the bin transition P(released bin j | the label's bin i) is keep_probability on the diagonal and "
    "move_probability off it (RR-Top-k: for the reported classes)"
)


class PriorFromFeaturesParty(BaseModel):
    """A feature-aware release's prior: stored priors a features party signed for these examples."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: Literal["features-party"] = Field(
        alias="from", description="features-party: the groups and priors of POST /v1/datasets/{id}/priors"
    )
    priors_id: str = Field(
        pattern=UUID_PATTERN.pattern,
        description="the stored priors (GET /v1/priors); every example they name must be in the release",
    )


class ReleaseIn(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a misspelt field is an error, never silently ignored
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
    epsilon: StrictFloat | None = Field(
        None,
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        description="example-level: total ε charged to every example in the release",
    )
    epsilon_user: StrictFloat | None = Field(
        None, ge=MIN_EPSILON, le=MAX_EPSILON, description="user-level: total ε charged to every user"
    )
    contribution_bound: (
        Annotated[StrictInt, Field(ge=1, le=MAX_BOUND), Integral] | Literal["auto", "private"] | None
    ) = Field(
        None,
        description="user-level: τ, the most examples per user that carry information; auto: chosen from "
        "the noisy prior and the examples per user (docs/math.md §10); private: an ε-DP quantile of "
        "examples per user",
    )
    epsilon_bound: StrictFloat | None = Field(
        None,
        ge=MIN_EPSILON_PRIOR,
        description="user-level, contribution_bound private: the part of epsilon_user spent choosing τ "
        "(default a tenth)",
    )
    epsilon_prior: StrictFloat | None = Field(
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
    objective: ObjectiveName | None = Field(
        None,
        description="what the bins minimize: label, each released label's expected loss (the paper's "
        "objective), or model, the error of a model trained on the release's n labels (docs/math.md "
        "§12); naming one asks for RR-on-Bins; default: model for the squared loss when ε₂ ≥ 0.2, label "
        "otherwise (a model_capacity alone: model; user-level: the loss's own at every ε₂; on priors: at the "
        "whole ε; docs/concepts/mechanism.md)",
    )
    model_capacity: StrictFloat | None = Field(
        None,
        ge=1,
        le=MAX_MODEL_CAPACITY,
        description="objective model: how many examples' worth of parameters the model that will train "
        f"on the release fits (n_eff = n / capacity; default {DEFAULT_MODEL_CAPACITY:g}, fitted for "
        "the features party's gradient boosting); public, like ε",
    )
    mechanism: MechanismKind | None = Field(
        None,
        description="rr_on_bins (regression: randomized response over optimal bins), rr_top_k (classes) or "
        "unbiased (squared and Poisson loss, example-level: the least-variance randomizer whose output has "
        "the label as its mean; its outputs reach beyond the support; docs/concepts/mechanism.md); default: "
        "a public rule of the loss, ε₂ and the support's size (the same page): unbiased for example-level "
        "releases of the squared and Poisson losses with ε₂ in [0.2, 16] on 3 to 201 support points, the "
        "loss's RR kind otherwise — and always for user-level releases, releases on priors, a release of "
        "every labelled example on a cluster, and a request naming objective or model_capacity",
    )

    prior: PriorFromFeaturesParty | None = Field(
        None,
        description="feature-aware (docs/concepts/feature-aware.md): each example the priors give a group "
        "is randomized by its group's mechanism at the whole ε (user level: at the release's ε₂), "
        "spending no ε₁ on it; the others take the release's own private prior as without them",
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
        if self.model_capacity is not None and self.objective == "label":  # (a default: the service)
            raise ValueError("model_capacity belongs to the objective model")
        if self.mechanism == "unbiased":
            if self.privacy_unit == "user":
                raise ValueError("the unbiased randomizer serves example-level releases")
            if self.objective == "model" or self.model_capacity is not None:
                raise ValueError("objective model and model_capacity belong to rr_on_bins and rr_top_k")
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
            self.objective,
            self.model_capacity,
            mechanism=self.mechanism,
            priors_id=None if self.prior is None else self.prior.priors_id,
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
    keep_probability: float | None = Field(
        description=f"once complete: {BIN_TRANSITION}; P(released bin = the label's bin) (null for the "
        "unbiased randomizer, which is not randomized response over bins)"
    )
    move_probability: float | None = Field(
        description="once complete: P(released bin = one particular other bin)"
    )
    priors_id: str | None = Field(
        description="feature-aware: the stored priors whose groups it used (their mechanisms: GET …/groups)"
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
            keep_probability=_keep(mechanism),
            move_probability=_move(mechanism),
            priors_id=r.priors_id,
            error=r.error,
            created_at=r.created_at,
            completed_at=r.completed_at,
        )


def _keep(mechanism: PublishedMechanism | None) -> float | None:
    if mechanism is None or mechanism.kind == "unbiased":
        return None
    return mechanism.threshold.keep_probability


def _move(mechanism: PublishedMechanism | None) -> float | None:
    if mechanism is None or mechanism.kind == "unbiased":
        return None
    return mechanism.threshold.move_probability


class EpsilonLowerBoundOut(BaseModel):
    """The canary check's bound (``labeldp audit epsilon``) with this release's own examples as the
    canaries: the labels party knows their labels and their released bins."""

    epsilon_low: float = Field(
        description="a Clopper–Pearson lower bound on the ε the sampler implements: at most the true ε "
        "with probability >= 1 − alpha, whatever the sampler does (a correct one stays <= the "
        "max_multiplicative_advantage)"
    )
    alpha: float = Field(description="the check's false-alarm rate")
    examples: int = Field(description="the examples the bound was computed from (the canaries)")
    rates: dict[str, float] = Field(
        description="the measured rates of the two most common bins a and b: p_a_given_a, p_a_given_b, …"
    )

    @classmethod
    def of(cls, b: EpsilonBound) -> EpsilonLowerBoundOut:
        return cls(epsilon_low=b.epsilon_low, alpha=b.alpha, examples=b.canaries, rates=b.rates)


class GroupAuditOut(BaseModel):
    group: int = Field(description="the group (-1: the examples the release's own mechanism released)")
    examples: int
    worst_case_additive_advantage: float
    max_multiplicative_advantage: float = Field(description="the implemented ε of the group's mechanism")
    additive_advantage: float = Field(
        description="exact, for an attacker knowing the true label histogram of this group's examples"
    )
    realized_additive_advantage: float = Field(description="that attacker on this group's actual outputs")


class GroupOut(BaseModel):
    group: int
    examples: int = Field(description="how many of the release's examples it released")
    mechanism: PublishedMechanism = Field(description="optimal for the group's prior (mechanism.prior)")


class AuditOut(BaseModel):
    """A release's privacy audit with the raw labels: tenant-only, free, never logged."""

    release_id: str
    examples: int = Field(description="examples audited (user-level: those within the bound)")
    worst_case_additive_advantage: float = Field(description="over every prior the attacker could hold")
    max_multiplicative_advantage: float = Field(description="the implemented ε")
    true_distribution: dict[str, float] = Field(
        description="exact numbers for the distribution attacker, who knows the true label histogram of "
        "these examples but no features "
        "(stronger than the recipient, who has the noisy prior): additive_mean (its advantage), "
        "success_without_mean / success_with_mean, share_trusting_noisy_label, multiplicative_max, and "
        "for regression mse_reduction_share (the part of its squared error the release removes)"
    )
    realized: dict[str, float] = Field(
        description="the distribution attacker's accuracy (the one above: the true label distribution, no "
        "features) on this release's actual outputs, without and with them"
    )
    epsilon_lower_bound: EpsilonLowerBoundOut | None = Field(
        description="the canary check on this release's examples (null when their labels fall in fewer "
        "than two bins); feature-aware: the highest of one check per mechanism, alpha split between them"
    )
    groups: list[GroupAuditOut] | None = Field(
        None, description="feature-aware: the same per mechanism that released examples (groups, and -1)"
    )

    @classmethod
    def of(cls, a: ReleaseAudit) -> AuditOut:
        bound = EpsilonLowerBoundOut.of(a.epsilon_lower_bound) if a.epsilon_lower_bound else None
        return cls(
            release_id=a.release_id,
            examples=a.examples,
            worst_case_additive_advantage=a.worst_case_additive_advantage,
            max_multiplicative_advantage=a.max_multiplicative_advantage,
            true_distribution=a.true_distribution,
            realized=a.realized,
            epsilon_lower_bound=bound,
            groups=None if a.groups is None else [GroupAuditOut(**vars(g)) for g in a.groups],
        )


class PreviewIn(ReleaseIn):
    prior_release_id: str | None = Field(
        None,
        max_length=64,
        description="use the noisy prior an earlier release of this dataset published (free post-processing)",
    )
    public_prior: list[StrictFloat] | None = Field(
        None, max_length=10_000, description="use a prior known from elsewhere: one mass per support point"
    )


class PriorsVerdictOut(BaseModel):
    """Whether a release on these priors is expected to train a better model than the same release
    without them."""

    with_priors: float = Field(
        description="the expected error of a model trained on the rows the group mechanisms release: "
        "each group's binning error plus its noise's variance over the model's effective sample size"
    )
    without_priors: float = Field(
        description="the same for the mechanism a release without priors would use (mechanism_without, "
        "at its ε₂), under the priors pooled"
    )
    mechanism_without: MechanismKind
    pays: bool = Field(description="with_priors < without_priors: release on the priors")

    @classmethod
    def of(cls, v: PriorsVerdict) -> PriorsVerdictOut:
        return cls.model_validate(v, from_attributes=True)


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
    expected_loss: float = Field(
        description="under the prior named by prior_source (tenant-only); for the unbiased randomizer its "
        "expected variance (the squared error of one released value)"
    )
    rr_on_bins_expected_loss: float | None = Field(
        None,
        description="squared and Poisson loss, example-level: RR-on-Bins's expected loss under the same "
        "prior, beside unbiased_expected_variance (whichever the request chose, the other is optimized too)",
    )
    unbiased_expected_variance: float | None = Field(
        None, description="the same releases: the unbiased randomizer's expected variance under that prior"
    )
    worst_case_additive_advantage: float = Field(
        description="what the release would state: the best attacker's gain in guessing a label's bin, "
        "over every prior (h − 1/m; unbiased: an upper bound)"
    )
    max_multiplicative_advantage: float = Field(description="what the release would state: the implemented ε")
    keep_probability: float | None = Field(description=BIN_TRANSITION + " (null for unbiased)")
    move_probability: float | None
    mechanism: PublishedMechanism
    groups: int | None = Field(
        None, description="with priors: how many groups they have (mechanism is then the release's own)"
    )
    examples_with_group: int | None = Field(
        None, description="with priors: the examples a group will release"
    )
    expected_loss_without_priors: float | None = Field(
        None, description="with priors: the expected loss of the same release without them (one stage)"
    )
    priors_verdict: PriorsVerdictOut | None = Field(
        None,
        description="with priors, example level: the public rule of whether they pay (docs/math.md §14, "
        "'When priors pay'), from the priors and public parameters only",
    )

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
            rr_on_bins_expected_loss=p.side_by_side.get("rr_on_bins_expected_loss"),
            unbiased_expected_variance=p.side_by_side.get("unbiased_expected_variance"),
            worst_case_additive_advantage=p.mechanism.worst_case_additive_advantage,
            max_multiplicative_advantage=p.mechanism.max_multiplicative_advantage,
            keep_probability=_keep(p.mechanism),
            move_probability=_move(p.mechanism),
            mechanism=p.mechanism,
            groups=p.groups,
            examples_with_group=p.examples_with_group,
            expected_loss_without_priors=p.expected_loss_without_priors,
            priors_verdict=None if p.priors_verdict is None else PriorsVerdictOut.of(p.priors_verdict),
        )
