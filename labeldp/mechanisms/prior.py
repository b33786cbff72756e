"""The private prior (Algorithm 4) and the default split of ε between prior and randomization.

Changing one label moves one unit of count from one support cell to another, so the histogram has L1
sensitivity 2; exact discrete Laplace noise with scale ``2/ε₁`` on the integer counts makes it
ε₁-DP. Negative noisy counts are clipped to 0 and the result normalized (uniform if nothing is left).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.epsilon import split_epsilon
from labeldp.mechanisms.exact_laplace import sample_discrete_laplace
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support, as_support
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector

HISTOGRAM_SENSITIVITY = 2
MAX_NOISE_SCALE = 2**40  # ε₁ >= about 1.8e-12; |noise| stays far inside int64 with certainty

# Default split: ε₁ = min(ε/2, PRIOR_EPSILON_SCALE · sqrt(k/n)); constant measured in
# benchmarks/bench_prior_split.py (BENCHMARKS.md, "Privacy budget split").
PRIOR_EPSILON_SCALE = 1.0


def default_prior_epsilon(epsilon: float, n: int, k: int) -> float:
    """The part of ``epsilon`` spent on the prior for ``n`` labels on a ``k``-point support.

    Theorem 7: the excess loss from a noisy prior behaves like ``A·ε₁ + B·k/(n·ε₁)``, minimized at
    ``ε₁ ∝ sqrt(k/n)``; so the prior's share of ε shrinks as ``n`` grows. On the real datasets the
    best ε₁ barely depends on ε itself (at large ε each unit taken from the randomization is
    expensive), and ``sqrt(k/n)`` was best or within a few percent of best for every n and ε
    measured; it is capped at half the budget. ``n``, ``k`` and ε are public, so is the split.
    """
    eps = check_epsilon(epsilon)
    if n <= 0 or k <= 0:
        raise ParameterError(f"n and k must be positive, got n={n}, k={k}")
    return min(eps / 2, PRIOR_EPSILON_SCALE * math.sqrt(k / n))


def prior_split(epsilon: float, n: int, k: int, epsilon_prior: float | None = None) -> tuple[float, float]:
    """``(ε₁, ε₂)``: the prior's part (``epsilon_prior``, or the default for ``n`` labels on ``k``
    support points) and the randomization's, exactly within ``epsilon``."""
    prior = default_prior_epsilon(epsilon, n, k) if epsilon_prior is None else epsilon_prior
    return split_epsilon(epsilon, prior)


def noisy_counts(
    labels: ArrayLike,
    support: Support | ArrayLike,
    epsilon: float,
    *,
    contribution_bound: int = 1,
    rng: SecureRandom | None = None,
) -> IntArray:
    """Histogram counts on the support plus exact discrete Laplace noise of scale ``2τ/epsilon``.

    ``contribution_bound`` τ: the most labels one protected unit (a user) has among ``labels``;
    changing all of them moves ``2τ`` units of count (1 for example-level privacy)."""
    y = finite_vector(labels, "labels", allow_empty=True)
    counts = as_support(support).counts(y)
    return noisy_histogram(counts, epsilon, contribution_bound=contribution_bound, rng=rng)


def noisy_histogram(
    counts: IntArray, epsilon: float, *, contribution_bound: int = 1, rng: SecureRandom | None = None
) -> IntArray:
    """Exact counts (e.g. summed over partitions by a cluster) plus discrete Laplace noise of scale
    ``2τ/epsilon``; the noise is drawn here, in the calling process, from its own CSPRNG."""
    eps = check_epsilon(epsilon)
    if int(contribution_bound) != contribution_bound or contribution_bound < 1:
        raise ParameterError("contribution_bound must be a positive integer", "contribution_bound")
    counts = np.asarray(counts, dtype=np.int64)
    scale = Fraction(HISTOGRAM_SENSITIVITY * int(contribution_bound)) / Fraction(eps)
    if scale > MAX_NOISE_SCALE:  # the noise would not fit a 64-bit count
        raise ParameterError(
            f"epsilon {eps!r} is too small for the prior's noise (scale 2τ/epsilon)", "epsilon"
        )
    return counts + sample_discrete_laplace(scale, counts.size, rng or SecureRandom())


def normalize_counts(counts: IntArray) -> FloatArray:
    clipped = np.maximum(np.asarray(counts, dtype=np.float64), 0.0)
    total = clipped.sum()
    if total <= 0:
        return np.full(clipped.size, 1.0 / clipped.size)
    return np.asarray(clipped / total, dtype=np.float64)


def private_prior(
    labels: ArrayLike,
    support: Support | ArrayLike,
    epsilon: float,
    *,
    contribution_bound: int = 1,
    rng: SecureRandom | None = None,
) -> FloatArray:
    """An ε-DP estimate of the label distribution on the public support (Algorithm 4); ε per user
    when each user has at most ``contribution_bound`` of the labels."""
    return normalize_counts(
        noisy_counts(labels, support, epsilon, contribution_bound=contribution_bound, rng=rng)
    )
