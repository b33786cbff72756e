"""Algorithm 3: spend ε₁ on a private prior, optimize the mechanism for it, randomize every label once.

By basic composition the release is (ε₁ + ε₂)-label-DP; the prior and the mechanism are DP outputs
themselves and may travel with the noisy labels (as ``LabelRelease.published``). Charging the budget
is the caller's job and must happen before this function is called (privacy invariant 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.epsilon import split_epsilon
from labeldp.mechanisms.factory import mechanism_kind, optimal_mechanism
from labeldp.mechanisms.losses import Loss, LossFn, check_labels_for_loss, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.prior import default_prior_epsilon, private_prior
from labeldp.mechanisms.published import PrivacyUnit, PublishedMechanism
from labeldp.mechanisms.randomized_response import class_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support, as_support, explicit_support
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector


@dataclass(frozen=True)
class LabelRelease:
    """What one release produced: the mechanism, the noisy prior it was optimized for, one
    privatized bin per input label, and the exact ε split (``epsilon_prior + epsilon_randomize <=
    epsilon``)."""

    mechanism: Mechanism
    prior: FloatArray  # the noisy prior on ``mechanism.support``
    bin_indices: IntArray  # one privatized bin per input label, in input order
    epsilon_prior: float
    epsilon_randomize: float
    epsilon: float

    @property
    def noisy_labels(self) -> FloatArray:
        """The output value of each label's bin (for classes: the reported class)."""
        return self.mechanism.values_of(self.bin_indices)

    def published(
        self, privacy_unit: PrivacyUnit = "example", contribution_bound: int | None = None
    ) -> PublishedMechanism:
        return self.mechanism.describe(
            prior=self.prior,
            epsilon_prior=self.epsilon_prior,
            epsilon_total=self.epsilon,
            privacy_unit=privacy_unit,
            contribution_bound=contribution_bound,
        )

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
    from the labels. Under the ``"zero_one"`` loss the labels are classes ``0..C-1`` (the support) and
    the mechanism is RR-Top-k; under any other loss it is RR-on-Bins.
    """
    eps = check_epsilon(epsilon)
    sup = as_support(support)
    loss_spec = resolve_loss(loss)
    if mechanism_kind(loss_spec.name) == "rr_top_k":
        y = class_labels(labels, sup.k).astype(np.float64)
        if y.size == 0:
            raise ParameterError("labels must not be empty", "labels")
    else:
        y = finite_vector(labels, "labels")
        check_labels_for_loss(y, loss_spec, "labels")
    eps_prior = default_prior_epsilon(eps, y.size, sup.k) if epsilon_prior is None else epsilon_prior
    eps_prior, eps_randomize = split_epsilon(eps, eps_prior)
    stream = rng or SecureRandom()
    prior = private_prior(y, sup, eps_prior, rng=stream)
    if isinstance(loss, str):
        mechanism = optimal_mechanism(sup, prior, eps_randomize, loss)
    else:  # a callable loss: RR-on-Bins optimized for it
        mechanism = optimize_rr_on_bins(sup, prior, eps_randomize, loss_spec)
    bins = mechanism.randomize(y, rng=stream)
    return LabelRelease(mechanism, prior, bins, eps_prior, eps_randomize, eps)


def release_classes(
    labels: ArrayLike,
    num_classes: int,
    epsilon: float,
    epsilon_prior: float | None = None,
    *,
    rng: SecureRandom | None = None,
) -> LabelRelease:
    """Categorical labels ``0..num_classes-1``: a private class prior (ε₁), then RR-Top-k for it (ε₂)."""
    if int(num_classes) != num_classes or num_classes < 1:
        raise ParameterError(f"num_classes must be a positive integer, got {num_classes!r}", "num_classes")
    classes = explicit_support(np.arange(int(num_classes), dtype=np.float64))
    return release_labels(labels, classes, epsilon, "zero_one", epsilon_prior, rng=rng)
