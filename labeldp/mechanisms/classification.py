"""RR-Top-k ("RRWithPrior", Ghazi et al. 2021; docs/math.md §5): RR-on-Bins for the 0-1 loss.

Randomized response over only the ``k*`` most likely classes, where ``k*`` maximizes the probability
of reporting the true label, ``(Σ_{top-k} p)·e^ε/(e^ε + k − 1)``. The ``k*`` reported classes are the
output bins (bin ``j`` reports class ``top[j]``). A label inside the top set goes through ε-RR over the
bins; a label outside it gets a uniform bin. Every ratio of output probabilities is at most ``e^ε``
(also with the integer thresholds, which only lower P(keep)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from labeldp.mechanisms import mechanism as rr
from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.losses import Loss, resolve_loss
from labeldp.mechanisms.mechanism import MechanismKind
from labeldp.mechanisms.randomized_response import KeepThreshold, class_labels, rr_draw
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support, explicit_support
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector

if TYPE_CHECKING:
    from labeldp.mechanisms.epsilon import UserBudget
    from labeldp.mechanisms.published import PublishedMechanism


@dataclass(frozen=True, eq=False)
class RRTopK:
    epsilon: float
    num_classes: int
    top: IntArray  # the k* reported classes, most likely first; bin j reports class top[j]
    objective_epsilon: float | None = None  # the ε k* was chosen at (objective "model")
    threshold: KeepThreshold = field(init=False, repr=False)
    support_bins: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        top = np.asarray(self.top, dtype=np.int64)
        if int(self.num_classes) != self.num_classes or self.num_classes < 1:
            raise ParameterError(
                f"num_classes must be a positive integer, got {self.num_classes!r}", "num_classes"
            )
        if top.ndim != 1 or top.size < 1 or np.unique(top).size != top.size:
            raise ParameterError("top must be distinct classes, at least one", "top")
        if top.min() < 0 or top.max() >= self.num_classes:
            raise ParameterError(f"top must be classes in 0..{self.num_classes - 1}", "top")
        position = np.full(int(self.num_classes), -1, dtype=np.int64)
        position[top] = np.arange(top.size)
        top.setflags(write=False)
        position.setflags(write=False)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(
            self, "objective_epsilon", rr.checked_objective_epsilon(self.objective_epsilon, eps)
        )
        object.__setattr__(self, "num_classes", int(self.num_classes))
        object.__setattr__(self, "top", top)
        object.__setattr__(self, "support_bins", position)
        object.__setattr__(self, "threshold", KeepThreshold.for_epsilon(eps, int(top.size)))

    @property
    def kind(self) -> MechanismKind:
        return "rr_top_k"

    @property
    def k(self) -> int:
        return int(self.top.size)

    @property
    def m(self) -> int:
        return self.k

    @property
    def support(self) -> Support:
        return explicit_support(np.arange(self.num_classes, dtype=np.float64))

    @property
    def bin_values(self) -> FloatArray:
        """The class each bin reports (as a float, like every label value)."""
        values = self.top.astype(np.float64)
        values.setflags(write=False)
        return values

    @property
    def loss(self) -> Loss:
        return resolve_loss("zero_one")

    @property
    def implemented_epsilon(self) -> float:
        return self.threshold.implemented_epsilon

    def transition_matrix(self) -> FloatArray:
        """``M[y, j] = P(output bin j | class y)``, shape ``(num_classes, k)``, exactly as sampled."""
        return rr.transition(self.support_bins, self.threshold)

    def values_of(self, indices: ArrayLike) -> FloatArray:
        return rr.values_of(self.bin_values, indices)

    def classes_of(self, indices: ArrayLike) -> IntArray:
        """Bin indices → the classes they report."""
        return self.values_of(indices).astype(np.int64)

    def expected_loss(self, values: ArrayLike, probs: ArrayLike) -> float:
        return rr.expected_loss(self, values, probs)

    def randomize(self, labels: ArrayLike, *, rng: SecureRandom | None = None) -> IntArray:
        """One privatized bin index per class label; every label makes the same draws."""
        y = class_labels(labels, self.num_classes)
        outside = self.k < self.num_classes  # public: whether any class is unreported
        return rr_draw(self.support_bins[y], self.threshold, rng or SecureRandom(), outside=outside)

    def describe(
        self,
        *,
        prior: ArrayLike,
        epsilon_prior: float,
        epsilon_total: float | None = None,
        user: UserBudget | None = None,
    ) -> PublishedMechanism:
        from labeldp.mechanisms.published import publish

        return publish(self, prior, epsilon_prior, epsilon_total, user)


def optimize_rr_top_k(probs: ArrayLike, epsilon: float, *, optimize_at: float | None = None) -> RRTopK:
    """The RR-Top-k mechanism for a prior over classes ``0..len(probs)-1``; ``optimize_at``: choose
    ``k*`` at that ε (objective ``model``) and randomize at ``epsilon``."""
    eps = check_epsilon(epsilon)
    at = rr.checked_objective_epsilon(optimize_at, eps)
    p = finite_vector(probs, "probs")
    if np.any(p < 0) or p.sum() <= 0:
        raise ParameterError("probs must be non-negative with a positive sum", "probs")
    p = p / p.sum()
    order = np.argsort(-p, kind="stable")
    ks = np.arange(1, p.size + 1)
    # the probability of reporting the true label, divided by e^ε (finite for every ε)
    score = np.cumsum(p[order]) / (1.0 + (ks - 1) * math.exp(-(eps if at is None else at)))
    k_star = int(np.argmax(score)) + 1
    return RRTopK(eps, int(p.size), order[:k_star].astype(np.int64), at)
