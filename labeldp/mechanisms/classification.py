"""RR-Top-k ("RRWithPrior", Ghazi et al. 2021; MATH.md §5): RR-on-Bins for the 0-1 loss.

Randomized response over only the ``k*`` most likely classes, where ``k*`` maximizes the probability
of reporting the true label, ``(Σ_{top-k} p)·e^ε/(e^ε + k − 1)``. A label inside the top set goes
through ε-RR over the set; a label outside it becomes a uniform draw from the set. Every ratio of
output probabilities is at most ``e^ε`` (also with the integer thresholds, which only lower P(keep)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.randomized_response import KeepThreshold, class_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.validation import check_epsilon, finite_vector


@dataclass(frozen=True, eq=False)
class RRTopK:
    epsilon: float
    num_classes: int
    top: IntArray  # the k* classes, most likely first
    threshold: KeepThreshold = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", KeepThreshold.for_epsilon(self.epsilon, int(self.top.size)))

    @property
    def k(self) -> int:
        return int(self.top.size)

    def transition_matrix(self) -> FloatArray:
        """``M[y, o] = P(output class o | label y)``, shape ``(num_classes, num_classes)``."""
        e = math.exp(self.epsilon)
        k, out = self.k, np.zeros((self.num_classes, self.num_classes))
        for y in range(self.num_classes):
            if y in self.top:
                out[y, self.top] = 1.0 / (e + k - 1)
                out[y, y] = e / (e + k - 1)
            else:
                out[y, self.top] = 1.0 / k
        return out

    def randomize(self, labels: ArrayLike, *, rng: SecureRandom | None = None) -> IntArray:
        y = class_labels(labels, self.num_classes)
        stream = rng or SecureRandom()
        position = np.full(self.num_classes, -1, dtype=np.int64)
        position[self.top] = np.arange(self.k)
        pos = position[y]
        n, k = y.size, self.k
        # every label draws the same three words, whatever its class
        keep = stream.uint64(n) < np.uint64(min(self.threshold.threshold, (1 << 64) - 1))
        other = stream.integers_below(max(k - 1, 1), n)
        other += other >= pos
        uniform = stream.integers_below(k, n)
        if k == 1:
            chosen = np.zeros(n, dtype=np.int64)
        else:
            chosen = np.where(pos >= 0, np.where(keep, pos, other), uniform)
        return self.top[chosen]


def optimize_rr_top_k(probs: ArrayLike, epsilon: float) -> RRTopK:
    """The RR-Top-k mechanism for a prior over classes ``0..len(probs)-1``."""
    eps = check_epsilon(epsilon)
    p = finite_vector(probs, "probs")
    if np.any(p < 0) or p.sum() <= 0:
        raise ValueError("probs must be non-negative with a positive sum")
    p = p / p.sum()
    order = np.argsort(-p, kind="stable")
    ks = np.arange(1, p.size + 1)
    e = math.exp(eps)
    score = np.cumsum(p[order]) * e / (e + ks - 1)
    k_star = int(np.argmax(score)) + 1
    return RRTopK(eps, int(p.size), order[:k_star].astype(np.int64))
