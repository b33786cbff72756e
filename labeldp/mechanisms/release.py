"""Algorithm 3: spend ε₁ on a private prior, optimize RR-on-Bins for it, randomize every label once.

By basic composition the release is (ε₁ + ε₂)-label-DP; the prior and the mechanism are DP outputs
themselves and may travel with the noisy labels. Charging the budget is the caller's job and must
happen before this function is called (privacy invariant 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.classification import RRTopK, optimize_rr_top_k
from labeldp.mechanisms.losses import Loss, LossFn, check_labels_for_loss, resolve_loss
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.prior import default_prior_epsilon, noisy_counts, normalize_counts, private_prior
from labeldp.mechanisms.randomized_response import class_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import Support, as_support, explicit_support
from labeldp.mechanisms.validation import check_epsilon, finite_vector


@dataclass(frozen=True)
class LabelRelease:
    mechanism: RROnBins
    prior: FloatArray  # the noisy prior on ``mechanism.support``
    bin_indices: IntArray  # one privatized bin per input label, in input order
    epsilon_prior: float
    epsilon_randomize: float

    @property
    def epsilon(self) -> float:
        return self.epsilon_prior + self.epsilon_randomize

    @property
    def noisy_labels(self) -> FloatArray:
        return self.mechanism.values_of(self.bin_indices)

    def __iter__(self) -> Iterator[Any]:
        """``mechanism, prior, bin_indices = release_labels(...)`` also works."""
        return iter((self.mechanism, self.prior, self.bin_indices))


def release_labels(
    labels: ArrayLike,
    support: Support | ArrayLike,
    epsilon: float,
    loss: str | LossFn | Loss = "squared",
    epsilon_prior: float | None = None,
    *,
    rng: SecureRandom | None = None,
) -> LabelRelease:
    """Privatize ``labels`` with total budget ``epsilon`` (Algorithm 3).

    ``epsilon_prior`` is the part spent on the prior; by default ``default_prior_epsilon``, which
    depends only on ``epsilon``, the support size ``k`` and the number of examples ``n`` (public:
    the message lists every example ID of the declared universe, labelled or not). Labels are
    clipped to the support's range and snapped to it first; the support is public and never derived
    from the labels.
    """
    eps = check_epsilon(epsilon)
    sup = as_support(support)
    loss_spec = resolve_loss(loss)
    y = finite_vector(labels, "labels")
    check_labels_for_loss(y, loss_spec, "labels")
    eps_prior = default_prior_epsilon(eps, y.size, sup.k) if epsilon_prior is None else epsilon_prior
    eps_prior = check_epsilon(eps_prior, "epsilon_prior")
    if not eps_prior < eps:
        raise ValueError(f"epsilon_prior must be < epsilon ({eps_prior!r} >= {eps!r})")
    eps_randomize = eps - eps_prior
    stream = rng or SecureRandom()
    prior = private_prior(y, sup, eps_prior, rng=stream)
    mechanism = optimize_rr_on_bins(sup, prior, eps_randomize, loss_spec)
    bins = mechanism.randomize(y, rng=stream)
    return LabelRelease(mechanism, prior, bins, eps_prior, eps_randomize)


@dataclass(frozen=True)
class ClassRelease:
    mechanism: RRTopK
    prior: FloatArray  # noisy class prior
    labels: IntArray  # one privatized class per input label
    epsilon_prior: float
    epsilon_randomize: float

    @property
    def epsilon(self) -> float:
        return self.epsilon_prior + self.epsilon_randomize


def release_classes(
    labels: ArrayLike,
    num_classes: int,
    epsilon: float,
    epsilon_prior: float | None = None,
    *,
    rng: SecureRandom | None = None,
) -> ClassRelease:
    """Categorical labels: a private class prior (ε₁), then RR-Top-k for it (ε₂) (MATH.md §5)."""
    eps = check_epsilon(epsilon)
    y = class_labels(labels, num_classes)
    if y.size == 0:
        raise ValueError("labels must not be empty")
    eps_prior = default_prior_epsilon(eps, y.size, num_classes) if epsilon_prior is None else epsilon_prior
    eps_prior = check_epsilon(eps_prior, "epsilon_prior")
    if not eps_prior < eps:
        raise ValueError(f"epsilon_prior must be < epsilon ({eps_prior!r} >= {eps!r})")
    stream = rng or SecureRandom()
    classes = explicit_support(np.arange(num_classes, dtype=np.float64))
    prior = normalize_counts(noisy_counts(y.astype(np.float64), classes, eps_prior, rng=stream))
    mechanism = optimize_rr_top_k(prior, eps - eps_prior)
    return ClassRelease(mechanism, prior, mechanism.randomize(y, rng=stream), eps_prior, eps - eps_prior)
