"""The published mechanism: one typed description of a release's mechanism, from optimizer to trainer.

The labels party produces it (``Mechanism.describe``), stores it with the release, answers it over
REST, signs it into the message header (``labeldp.common.wire`` is its one protobuf mapping), and the
features party reads it back to choose its model and debiasing. Everything in it is public or already
privatized: the kind of mechanism, the ε split, the public support, the *noisy* prior, the map from
support points to output bins and the bins' values.

It validates itself completely, because it also arrives from the network: a malformed description
from a (pinned but buggy or hostile) sender is refused before anything is stored.
"""

from __future__ import annotations

import math
from typing import Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from labeldp.mechanisms._types import ArrayLike, FloatArray
from labeldp.mechanisms.classification import RRTopK
from labeldp.mechanisms.epsilon import within
from labeldp.mechanisms.losses import REGRESSION_LOSSES, LossName, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism, MechanismKind
from labeldp.mechanisms.randomized_response import KeepThreshold
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import MAX_SUPPORT_SIZE, explicit_support
from labeldp.mechanisms.validation import ParameterError, finite_vector

PrivacyUnit = Literal["example", "user"]
MAX_BINS = 65_535  # bin indices travel as uint16 on the wire
_PRIOR_SUM_TOLERANCE = 1e-9


class PublishedMechanism(BaseModel):
    """A release's mechanism as both parties see it (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kind: MechanismKind = Field(description="rr_on_bins (regression) or rr_top_k (classes)")
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
        description="the output bin of each support point; -1: not reported, answered with a uniform bin"
    )
    bin_values: tuple[float, ...] = Field(
        min_length=1, max_length=MAX_BINS, description="the output value of each bin index"
    )
    privacy_unit: PrivacyUnit = Field("example", description="whose privacy ε protects: an example or a user")
    contribution_bound: int | None = Field(
        None, ge=1, description="user-level releases: at most this many examples per user carry information"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        k, m = len(self.support), len(self.bin_values)
        if len(self.prior) != k or len(self.support_bins) != k:
            raise ValueError("support, prior and support_bins must have the same length")
        support = np.asarray(self.support)
        if k > 1 and np.any(np.diff(support) <= 0):
            raise ValueError("support must be strictly increasing")
        prior = np.asarray(self.prior)
        if np.any(prior < 0) or abs(float(prior.sum()) - 1.0) > _PRIOR_SUM_TOLERANCE * max(k, 1):
            raise ValueError("prior must be non-negative and sum to 1")
        if not within((self.epsilon_prior, self.epsilon_randomize), self.epsilon):
            raise ValueError("epsilon_prior + epsilon_randomize must not exceed epsilon")
        if self.implemented_epsilon > self.epsilon_randomize:
            raise ValueError("implemented_epsilon must not exceed epsilon_randomize")
        bins = np.asarray(self.support_bins, dtype=np.int64)
        if bins.size and (bins.min() < -1 or bins.max() >= m):
            raise ValueError(f"support_bins must lie in -1..{m - 1}")
        if self.kind == "rr_on_bins":
            self._check_rr_on_bins(bins, m)
        else:
            self._check_rr_top_k(bins, support, m)
        if (self.privacy_unit == "user") != (self.contribution_bound is not None):
            raise ValueError("a contribution_bound is given exactly for user-level releases")
        return self

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
    def threshold(self) -> KeepThreshold:
        return KeepThreshold.for_epsilon(self.epsilon_randomize, self.m)

    @property
    def bin_edges(self) -> list[tuple[float, float]]:
        """Each bin's lowest and highest support value (for RR-Top-k: the class it reports)."""
        bins = np.asarray(self.support_bins)
        values = np.asarray(self.support)
        return [(float(values[bins == j].min()), float(values[bins == j].max())) for j in range(self.m)]

    def mechanism(self) -> Mechanism:
        """The mechanism object this describes (to randomize, or to compute its transition)."""
        if self.kind == "rr_top_k":
            bins = np.asarray(self.support_bins, dtype=np.int64)
            top = np.empty(self.m, dtype=np.int64)
            top[bins[bins >= 0]] = np.flatnonzero(bins >= 0)  # bin j reports class top[j]
            return RRTopK(self.epsilon_randomize, len(self.support), top)
        return RROnBins(
            self.epsilon_randomize,
            explicit_support(self.support),
            np.asarray(self.support_bins, dtype=np.int64),
            np.asarray(self.bin_values),
            resolve_loss(self.loss),
        )

    def transition_matrix(self) -> FloatArray:
        """``P(output bin j | label = support value i)``, ``k × m``, exactly as sampled."""
        return self.mechanism().transition_matrix()

    def bin_transition(self) -> FloatArray:
        """``P(output bin j | true bin i)``, ``m × m``, for labels inside the reported bins."""
        return self.threshold.transition()

    def expected_loss_under_prior(self) -> float:
        """The expected loss of the outputs if labels followed the (noisy) prior it carries."""
        return self.mechanism().expected_loss(self.support, self.prior)


def publish(
    mechanism: Mechanism,
    prior: ArrayLike,
    epsilon_prior: float,
    epsilon_total: float | None,
    privacy_unit: PrivacyUnit,
    contribution_bound: int | None,
) -> PublishedMechanism:
    """``Mechanism.describe``: the mechanism, its noisy prior and the ε split as a published object."""
    p = finite_vector(prior, "prior")
    if p.size != mechanism.support.k:
        raise ParameterError("prior must have one mass per support point", "prior")
    if np.any(p < 0) or not p.sum() > 0:
        raise ParameterError("prior must be non-negative with a positive sum", "prior")
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
            privacy_unit=privacy_unit,
            contribution_bound=contribution_bound,
        )
    except ValueError as exc:
        raise ParameterError(f"cannot publish this mechanism: {exc}", "mechanism") from exc
