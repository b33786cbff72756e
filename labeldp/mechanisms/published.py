"""The published mechanism: one typed description of a release's mechanism, from optimizer to trainer.

The labels party produces it (``Mechanism.describe``, i.e. ``publish``), stores it with the release,
answers it over
REST, signs it into the message header (``labeldp.common.wire`` is its one protobuf mapping), and the
features party reads it back to choose its model and debiasing. Everything in it is public or already
privatized: the kind of mechanism, the ε split, the public support, the *noisy* prior, the map from
support points to output bins and the bins' values.

It validates itself completely, because it also arrives from the network: a malformed description
from a (pinned but buggy or hostile) sender is refused before anything is stored. The unbiased
randomizer (``kind = "unbiased"``) has no bins of its own: it states its outputs (``bin_values``, which
reach beyond the support), its integer base weights and each support point's window
(``labeldp.mechanisms.unbiased_weights``); the receiver rebuilds the exact integer rows from them and
checks that they are ε-DP (by construction) and unbiased (to ``MAX_BIAS``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from labeldp.mechanisms._types import ArrayLike, FloatArray
from labeldp.mechanisms.epsilon import UserBudget, user_level_cost, within
from labeldp.mechanisms.losses import REGRESSION_LOSSES, LossName, resolve_loss
from labeldp.mechanisms.mechanism import MechanismKind, transition
from labeldp.mechanisms.objective import ObjectiveName
from labeldp.mechanisms.randomized_response import KeepThreshold
from labeldp.mechanisms.support import MAX_SUPPORT_SIZE
from labeldp.mechanisms.unbiased_weights import (
    MAX_BIAS,
    MAX_UNBIASED_EPSILON,
    MAX_UNBIASED_OUTPUTS,
    MAX_UNBIASED_SUPPORT,
    UnbiasedWeights,
)
from labeldp.mechanisms.validation import ParameterError, finite_vector

if TYPE_CHECKING:
    from labeldp.mechanisms.mechanism import Mechanism

PrivacyUnit = Literal["example", "user"]
MAX_BINS = 65_534  # bin codes (the bins, plus the capped code) travel as uint16 on the wire
MAX_CONTRIBUTION_BOUND = 1_000_000
_PRIOR_SUM_TOLERANCE = 1e-9


class PublishedMechanism(BaseModel):
    """A release's mechanism as both parties see it (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: MechanismKind = Field(
        description="rr_on_bins (regression), rr_top_k (classes) or unbiased (regression: outputs whose "
        "mean is the label)"
    )
    loss: LossName = Field(description="the loss the mechanism was optimized for (and models train with)")
    epsilon: float = Field(
        gt=0, description="total ε charged to every example: epsilon_prior + epsilon_randomize"
    )
    epsilon_prior: float = Field(ge=0, description="ε₁, spent on the noisy prior")
    epsilon_randomize: float = Field(gt=0, description="ε₂, spent on randomizing each label once")
    implemented_epsilon: float = Field(
        ge=0, description="the ε the integer sampling thresholds implement (<= epsilon_randomize)"
    )
    support: tuple[float, ...] = Field(
        min_length=1, max_length=MAX_SUPPORT_SIZE, description="the public label support, increasing"
    )
    prior: tuple[float, ...] = Field(description="the noisy prior on the support (a DP output)")
    support_bins: tuple[int, ...] = Field(
        description="the output bin of each support point; -1: not reported, answered with a uniform bin; "
        "empty for unbiased (no support point has an output of its own)"
    )
    bin_values: tuple[float, ...] = Field(
        min_length=1,
        max_length=MAX_BINS,
        description="the output value of each bin index (unbiased: the outputs, increasing; they reach "
        "beyond the support)",
    )
    base_weights: tuple[int, ...] = Field(
        (),
        max_length=MAX_UNBIASED_OUTPUTS,
        description="unbiased: each output's weight in every support point's row, out of 2^53 "
        "(docs/math.md §15)",
    )
    window_starts: tuple[int, ...] = Field(
        (),
        max_length=MAX_UNBIASED_SUPPORT,
        description="unbiased: the output at which each support point's window of extra weight starts",
    )
    window_offsets: tuple[int, ...] = Field(
        (),
        max_length=MAX_UNBIASED_SUPPORT,
        description="unbiased: how many weight units into that output's capacity the window starts",
    )
    objective: ObjectiveName = Field(
        "label",
        description="what the bins minimize: each released label's expected loss (label, the paper's "
        "objective) or a model's error trained on the release (model)",
    )
    objective_epsilon: float | None = Field(
        None,
        gt=0,
        description="objective model: the ε at which the bins minimize the per-label loss, the stand-in "
        "for the model's error (docs/math.md §12); not a privacy parameter: labels are randomized at "
        "epsilon_randomize",
    )
    privacy_unit: PrivacyUnit = Field("example", description="whose privacy ε protects: an example or a user")
    contribution_bound: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTRIBUTION_BOUND,
        description="user-level: at most this many examples per user are randomized (τ); the others "
        "carry no label information and arrive with the capped bin code m",
    )
    prior_contribution_bound: int | None = Field(
        None,
        ge=1,
        le=MAX_CONTRIBUTION_BOUND,
        description="user-level: examples per user in the prior's histogram (τ_p; noise scale 2τ_p/ε₁)",
    )
    epsilon_bound: float = Field(
        0.0, ge=0, description="user-level: ε spent choosing the contribution bound privately (ε_τ)"
    )
    epsilon_example: float | None = Field(
        None,
        gt=0,
        description="user-level: the most ε one example's label is exposed to (ε₁/τ_p + ε₂); "
        "example-level releases: epsilon",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        k, m = len(self.support), len(self.bin_values)
        if len(self.prior) != k:
            raise ValueError("support and prior must have the same length")
        if self.kind == "unbiased":
            if self.support_bins:
                raise ValueError(
                    "unbiased states no support_bins (no support point has an output of its own)"
                )
        elif len(self.support_bins) != k:
            raise ValueError("support, prior and support_bins must have the same length")
        elif self.base_weights or self.window_starts or self.window_offsets:
            raise ValueError("base_weights and the windows belong to the unbiased randomizer only")
        support = np.asarray(self.support)
        if k > 1 and np.any(np.diff(support) <= 0):
            raise ValueError("support must be strictly increasing")
        prior = np.asarray(self.prior)
        if np.any(prior < 0) or abs(float(prior.sum()) - 1.0) > _PRIOR_SUM_TOLERANCE * max(k, 1):
            raise ValueError("prior must be non-negative and sum to 1")
        if self.privacy_unit == "user":
            self._check_user_level()
        else:
            if not within((self.epsilon_prior, self.epsilon_randomize), self.epsilon):
                raise ValueError("epsilon_prior + epsilon_randomize must not exceed epsilon")
            user_fields = (self.contribution_bound, self.prior_contribution_bound, self.epsilon_example)
            if any(f is not None for f in user_fields) or self.epsilon_bound:
                raise ValueError(
                    "contribution_bound, prior_contribution_bound, epsilon_bound and epsilon_example "
                    "belong to user-level releases only"
                )
        if self.implemented_epsilon > self.epsilon_randomize:
            raise ValueError("implemented_epsilon must not exceed epsilon_randomize")
        if (self.objective == "model") != (self.objective_epsilon is not None):
            raise ValueError("objective_epsilon is stated exactly when the objective is model")
        if self.objective_epsilon is not None and self.objective_epsilon < self.epsilon_randomize:
            raise ValueError("objective_epsilon must be at least epsilon_randomize")
        bins = np.asarray(self.support_bins, dtype=np.int64)
        if bins.size and (bins.min() < -1 or bins.max() >= m):
            raise ValueError(f"support_bins must lie in -1..{m - 1}")
        if self.kind == "rr_on_bins":
            self._check_rr_on_bins(bins, m)
        elif self.kind == "rr_top_k":
            self._check_rr_top_k(bins, support, m)
        else:
            self._check_unbiased(support)
        return self

    def _check_unbiased(self, support: np.ndarray) -> None:
        if self.loss not in ("squared", "poisson"):
            raise ValueError(
                "unbiased serves the squared and poisson losses (whose best prediction is the mean)"
            )
        if self.objective != "label" or self.privacy_unit != "example":
            raise ValueError("unbiased releases have the label objective and example-level privacy")
        if len(support) > MAX_UNBIASED_SUPPORT or self.epsilon_randomize > MAX_UNBIASED_EPSILON:
            raise ValueError(
                f"unbiased randomizers have at most {MAX_UNBIASED_SUPPORT} support points and "
                f"epsilon_randomize <= {MAX_UNBIASED_EPSILON:g}"
            )
        try:
            weights = self.unbiased_weights()
        except ParameterError as exc:
            raise ValueError(f"malformed unbiased randomizer: {exc}") from exc
        if self.implemented_epsilon != weights.implemented_epsilon:
            raise ValueError("implemented_epsilon is not what the unbiased randomizer's weights implement")
        bias = float(np.abs(weights.means() - support).max())
        if bias > MAX_BIAS * float(support[-1] - support[0]):
            raise ValueError(f"the unbiased randomizer is biased (by {bias:g} at some support point)")

    def _check_user_level(self) -> None:
        tau, tau_prior = self.contribution_bound, self.prior_contribution_bound
        if tau is None or tau_prior is None or self.epsilon_example is None:
            raise ValueError(
                "a user-level release states contribution_bound, prior_contribution_bound and epsilon_example"
            )
        cost = user_level_cost(self.epsilon_bound, self.epsilon_prior, self.epsilon_randomize, tau)
        if cost > Fraction(self.epsilon):
            raise ValueError(
                "epsilon_bound + epsilon_prior + contribution_bound·epsilon_randomize exceeds epsilon"
            )
        exposure = Fraction(self.epsilon_prior) / tau_prior + Fraction(self.epsilon_randomize)
        if Fraction(self.epsilon_example) < exposure:
            raise ValueError(
                "epsilon_example is below epsilon_prior/prior_contribution_bound + epsilon_randomize"
            )

    def _check_rr_on_bins(self, bins: np.ndarray, m: int) -> None:
        if self.loss not in REGRESSION_LOSSES:
            raise ValueError(f"rr_on_bins is optimized for a regression loss, not {self.loss!r}")
        steps = np.diff(bins)
        if bins[0] != 0 or bins[-1] != m - 1 or np.any(steps < 0) or np.any(steps > 1):
            raise ValueError("rr_on_bins maps the support onto bins 0..m-1 in order (intervals)")
        if np.any(np.diff(np.asarray(self.bin_values)) < 0):
            raise ValueError("rr_on_bins bin_values must be sorted")

    def _check_rr_top_k(self, bins: np.ndarray, support: np.ndarray, m: int) -> None:
        if self.loss != "zero_one":
            raise ValueError("rr_top_k is optimized for the zero_one loss")
        if not np.array_equal(support, np.arange(support.size, dtype=np.float64)):
            raise ValueError("rr_top_k's support is the classes 0..C-1")
        reported = bins[bins >= 0]
        if reported.size != m or np.unique(reported).size != m:
            raise ValueError("rr_top_k reports each of its bins for exactly one class")
        classes = np.empty(m)
        classes[bins[bins >= 0]] = np.flatnonzero(bins >= 0)
        if not np.array_equal(classes, np.asarray(self.bin_values)):
            raise ValueError("rr_top_k's bin_values are the classes its bins report")

    # -- what the consumers need -------------------------------------------------------------------
    @property
    def m(self) -> int:
        return len(self.bin_values)

    @property
    def capped_bin(self) -> int | None:
        """The bin code of examples over the contribution bound (user-level releases): ``m``, one past
        the last real bin. They carry no label information; models must not train on them."""
        return self.m if self.privacy_unit == "user" else None

    @property
    def bin_codes(self) -> int:
        """How many distinct bin codes the release's outputs use (the bins, plus the capped code)."""
        return self.m + (1 if self.privacy_unit == "user" else 0)

    @property
    def epsilon_per_example(self) -> float:
        """The most ε one example's label is exposed to in this release."""
        return self.epsilon_example if self.epsilon_example is not None else self.epsilon

    @property
    def threshold(self) -> KeepThreshold:
        """The keep/move thresholds of randomized response over the bins (the RR kinds only)."""
        if self.kind == "unbiased":
            raise ValueError("the unbiased randomizer is not randomized response over bins")
        return KeepThreshold.for_epsilon(self.epsilon_randomize, self.m)

    @cached_property
    def _unbiased(self) -> UnbiasedWeights:
        return UnbiasedWeights(
            self.epsilon_randomize,
            np.asarray(self.bin_values),
            self.base_weights,
            self.window_starts,
            self.window_offsets,
        )

    def unbiased_weights(self) -> UnbiasedWeights:
        """The unbiased randomizer's exact integer rows (``kind = "unbiased"`` only)."""
        if self.kind != "unbiased":
            raise ValueError(f"a {self.kind} mechanism has no unbiased weights")
        return self._unbiased

    @property
    def bin_edges(self) -> list[tuple[float, float]]:
        """Each bin's lowest and highest support value (for RR-Top-k: the class it reports; for the
        unbiased randomizer, whose outputs are not support values: each output itself)."""
        if self.kind == "unbiased":
            return [(v, v) for v in self.bin_values]
        bins = np.asarray(self.support_bins)
        values = np.asarray(self.support)
        return [(float(values[bins == j].min()), float(values[bins == j].max())) for j in range(self.m)]

    @property
    def worst_case_additive_advantage(self) -> float:
        """How much more often than before the best attacker can guess a label's bin (RR-Top-k: its
        class) after seeing its released bin, maximized over every prior it could hold: ``h − 1/m``
        (keep probability minus a uniform guess; docs/math.md §11). A function of the mechanism alone.
        The unbiased randomizer (the attacker guesses the support point): the bound ``(S − 1)/S``
        with ``S = Σ_z max_y P(z | y)``, which no prior exceeds (docs/math.md §15.5)."""
        if self.m == 1:
            return 0.0
        if self.kind == "unbiased":
            top = float(self.transition_matrix().max(axis=0).sum())
            return max((top - 1.0) / top, 0.0)
        return max(self.threshold.keep_probability - 1.0 / self.m, 0.0)

    @property
    def max_multiplicative_advantage(self) -> float:
        """The most one released bin can shift the attacker's log-odds between two labels: the
        implemented ε (docs/math.md §11)."""
        return self.implemented_epsilon if self.m > 1 else 0.0

    def transition_matrix(self) -> FloatArray:
        """``P(output bin j | label = support value i)``, ``k × m``, exactly as sampled (the samplers
        compute the same matrix from the same thresholds: ``mechanism.transition``, or the same
        integer rows: ``UnbiasedWeights``)."""
        if self.kind == "unbiased":
            return self.unbiased_weights().transition()
        return transition(np.asarray(self.support_bins, dtype=np.int64), self.threshold)

    def bin_transition(self) -> FloatArray:
        """``P(output bin j | true bin i)``, ``m × m``, for labels inside the reported bins."""
        return self.threshold.transition()

    def expected_loss_under_prior(self) -> float:
        """The expected loss of the outputs if labels followed the (noisy) prior it carries:
        ``Σ_i p_i Σ_j P(j | y_i) ℓ(ŷ_j, y_i)``."""
        p = np.asarray(self.prior, dtype=np.float64)
        rows = self.transition_matrix()
        if self.kind == "unbiased":  # its variance: the Poisson loss of an output below zero is undefined
            errors = (np.asarray(self.bin_values)[None, :] - np.asarray(self.support)[:, None]) ** 2
            return float(np.dot(p / p.sum(), (rows * errors).sum(axis=1)))
        ell = resolve_loss(self.loss)
        losses = ell(
            np.asarray(self.bin_values)[None, :], np.asarray(self.support, dtype=np.float64)[:, None]
        )
        per_label = np.einsum("ij,ij->i", rows, np.where(rows > 0, losses, 0.0))
        return float(np.dot(p / p.sum(), per_label))

    def binning_loss_under_prior(self) -> float:
        """The loss of a label's bin value against the label itself, beyond the loss of the label itself
        (``ℓ(Φ(y), y) − ℓ(y, y)``: Poisson's is not zero), averaged over the noisy prior it carries:
        how far the bins are from the labels before any noise. A model trained on the release
        learns the bins, so this is the part of its error against the true labels that a loss
        measured against the bins does not show. RR-Top-k (classes): the mass of unreported classes."""
        prior = np.asarray(self.prior, dtype=np.float64)
        prior = prior / prior.sum() if prior.sum() > 0 else prior
        if self.kind == "unbiased":
            return 0.0  # no bins: every output is an unbiased estimate of the label itself
        bins = np.asarray(self.support_bins, dtype=np.int64)
        if self.kind == "rr_top_k":
            return float(prior[bins < 0].sum())
        values = np.asarray(self.bin_values, dtype=np.float64)[bins]
        labels = np.asarray(self.support, dtype=np.float64)
        ell = resolve_loss(self.loss)
        return float(np.dot(prior, ell(values, labels) - ell(labels, labels)))  # 0 for exact bins


def publish(
    mechanism: Mechanism,
    prior: ArrayLike,
    epsilon_prior: float,
    epsilon_total: float | None,
    user: UserBudget | None = None,
    unbiased: UnbiasedWeights | None = None,
) -> PublishedMechanism:
    """``Mechanism.describe``: the mechanism, its noisy prior and the ε split as a published object
    (``unbiased``: the unbiased randomizer's integer rows)."""
    p = finite_vector(prior, "prior")
    if p.size != mechanism.support.k:
        raise ParameterError("prior must have one mass per support point", "prior")
    if np.any(p < 0) or not p.sum() > 0:
        raise ParameterError("prior must be non-negative with a positive sum", "prior")
    if user is not None:
        epsilon_total = user.epsilon_user if epsilon_total is None else epsilon_total
    if epsilon_total is None:  # the smallest double not below ε₁ + ε₂
        exact = epsilon_prior + mechanism.epsilon
        epsilon_total = (
            exact if within((epsilon_prior, mechanism.epsilon), exact) else math.nextafter(exact, math.inf)
        )
    try:
        return PublishedMechanism(
            kind=mechanism.kind,
            loss=mechanism.loss.name,
            epsilon=epsilon_total,
            epsilon_prior=epsilon_prior,
            epsilon_randomize=mechanism.epsilon,
            implemented_epsilon=mechanism.implemented_epsilon,
            support=tuple(mechanism.support.values.tolist()),
            prior=tuple((p / p.sum()).tolist()),
            support_bins=tuple(mechanism.support_bins.tolist()),
            bin_values=tuple(mechanism.bin_values.tolist()),
            objective="label" if mechanism.objective_epsilon is None else "model",
            objective_epsilon=mechanism.objective_epsilon,
            **(_user_fields(user) if user is not None else {}),
            **(_unbiased_fields(unbiased) if unbiased is not None else {}),
        )
    except ValueError as exc:
        raise ParameterError(f"cannot publish this mechanism: {exc}", "mechanism") from exc


def _unbiased_fields(weights: UnbiasedWeights) -> dict[str, object]:
    return {"base_weights": weights.base, "window_starts": weights.starts, "window_offsets": weights.offsets}


def _user_fields(user: UserBudget) -> dict[str, object]:
    return {
        "privacy_unit": "user",
        "contribution_bound": user.contribution_bound,
        "prior_contribution_bound": user.prior_contribution_bound,
        "epsilon_bound": user.epsilon_bound,
        "epsilon_example": user.epsilon_example,
    }
