"""The unbiased randomizer as a label mechanism: ``kind = "unbiased"``.

Every label ``y`` is replaced by an output ``z`` with ``E[z | y] = y`` (docs/math.md §15): a model
fit to the outputs by least squares estimates ``E[y | x]`` with no correction, and the Poisson loss,
which is affine in its target, is unbiased too. The outputs reach beyond ``[lo, hi]`` — they must: an
unbiased estimate of ``lo`` that never goes below ``lo`` is ``lo`` itself — so a released value is a
training target, not a plausible label. The sampler and every reader use one integer form
(``labeldp.mechanisms.unbiased_weights``); the optimizer is ``labeldp.mechanisms.unbiased_program``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.losses import Loss, check_labels_for_loss
from labeldp.mechanisms.mechanism import MechanismKind, values_of
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support
from labeldp.mechanisms.unbiased_weights import UnbiasedWeights
from labeldp.mechanisms.validation import ParameterError, finite_vector

if TYPE_CHECKING:
    from labeldp.mechanisms.epsilon import UserBudget
    from labeldp.mechanisms.published import PublishedMechanism

UNBIASED_LOSSES = ("squared", "poisson")  # the losses whose minimizer is the mean (absolute: the median)


def check_unbiased_loss(loss: str) -> None:
    if loss not in UNBIASED_LOSSES:
        raise ParameterError(
            f"the unbiased randomizer serves the losses {', '.join(UNBIASED_LOSSES)} (whose best prediction "
            f"is the mean), not {loss!r}",
            "loss",
        )


@dataclass(frozen=True, eq=False)
class UnbiasedRandomizer:
    """The unbiased ε-DP randomizer on a public support, in its exact integer form."""

    support: Support
    weights: UnbiasedWeights
    loss: Loss
    implemented_epsilon: float = field(init=False)
    support_bins: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_unbiased_loss(self.loss.name)
        if self.weights.k != self.support.k:
            raise ParameterError("the weights must state a window for every support point", "weights")
        empty = np.empty(0, dtype=np.int64)
        empty.setflags(write=False)
        object.__setattr__(self, "implemented_epsilon", self.weights.implemented_epsilon)
        object.__setattr__(self, "support_bins", empty)  # no support point has an output of its own

    @property
    def kind(self) -> MechanismKind:
        return "unbiased"

    @property
    def epsilon(self) -> float:
        return self.weights.epsilon

    @property
    def objective_epsilon(self) -> float | None:
        return None

    @property
    def bin_values(self) -> FloatArray:
        return self.weights.outputs

    @property
    def m(self) -> int:
        return self.weights.m

    def transition_matrix(self) -> FloatArray:
        """``P(output j | label = support value i)``, exactly as sampled."""
        return self.weights.transition()

    def randomize(self, labels: ArrayLike, *, rng: SecureRandom | None = None) -> IntArray:
        """One output index per label (clipped and snapped to the support first)."""
        return self.weights.draw(self.support.snap(labels), rng or SecureRandom())

    def values_of(self, indices: ArrayLike) -> FloatArray:
        return values_of(self.weights.outputs, indices)

    def expected_loss(self, values: ArrayLike, probs: ArrayLike) -> float:
        """The expected squared error ``Σ_i p_i E[(z − y_i)² | y_i]`` — the variance, the loss an
        unbiased release is judged by under either loss it serves (the Poisson loss of an output
        below zero is undefined)."""
        y = finite_vector(values, "values")
        p = finite_vector(probs, "probs")
        if y.size != p.size:
            raise ParameterError(
                f"values and probs must have the same length ({y.size} != {p.size})", "values"
            )
        if np.any(p < 0) or p.sum() <= 0:
            raise ParameterError("probs must be non-negative with a positive sum", "probs")
        check_labels_for_loss(y, self.loss, "values")
        rows = self.transition_matrix()[self.support.snap(y, "values")]
        errors = (self.weights.outputs[None, :] - y[:, None]) ** 2
        return float(np.dot(p / p.sum(), (rows * errors).sum(axis=1)))

    def describe(
        self,
        *,
        prior: ArrayLike,
        epsilon_prior: float,
        epsilon_total: float | None = None,
        user: UserBudget | None = None,
    ) -> PublishedMechanism:
        from labeldp.mechanisms.published import publish

        if user is not None:
            raise ParameterError("the unbiased randomizer serves example-level releases", "privacy_unit")
        return publish(self, prior, epsilon_prior, epsilon_total, user, self.weights)

    def __repr__(self) -> str:
        return (
            f"UnbiasedRandomizer(epsilon={self.epsilon:g}, outputs={self.m}, loss={self.loss.name!r}, "
            f"range=[{self.weights.outputs[0]:.4g}, {self.weights.outputs[-1]:.4g}])"
        )
