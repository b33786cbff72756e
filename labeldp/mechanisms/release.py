"""Algorithm 3: spend ε₁ on a private prior, optimize the mechanism for it, randomize every label once.

By basic composition the release is (ε₁ + ε₂)-label-DP; the prior and the mechanism are DP outputs
themselves and may travel with the noisy labels (as ``LabelRelease.published``). Charging the budget
is the caller's job and must happen before this function is called (privacy invariant 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.epsilon import UserBudget, float_at_most
from labeldp.mechanisms.factory import (
    check_mechanism_epsilon,
    default_mechanism,
    mechanism_kind,
    optimal_mechanism,
)
from labeldp.mechanisms.losses import Loss, LossFn, LossName, check_labels_for_loss, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism, MechanismKind
from labeldp.mechanisms.objective import Objective, ObjectiveName
from labeldp.mechanisms.optimize import optimize_rr_on_bins
from labeldp.mechanisms.prior import prior_split, private_prior
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.randomized_response import class_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support, as_support, explicit_support
from labeldp.mechanisms.user_level import (
    DEFAULT_BOUND_QUANTILE,
    DEFAULT_MAX_BOUND,
    BoundRule,
    choose_contribution_bound,
    contribution_ranks,
    examples_per_user,
    plan_user_split,
    private_contribution_bound,
)
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
    user: UserBudget | None = None  # user-level releases: how each user's ε was spent

    @property
    def capped(self) -> npt.NDArray[np.bool_]:
        """Which examples were over the contribution bound (code ``m``: no label information)."""
        return np.asarray(self.bin_indices == self.mechanism.m)

    @property
    def noisy_labels(self) -> FloatArray:
        """The output value of each label's bin (for classes: the reported class); NaN when capped."""
        capped = self.capped
        out = np.full(self.bin_indices.size, np.nan)
        out[~capped] = self.mechanism.values_of(self.bin_indices[~capped])
        return out

    def published(self) -> PublishedMechanism:
        return self.mechanism.describe(
            prior=self.prior, epsilon_prior=self.epsilon_prior, epsilon_total=self.epsilon, user=self.user
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
    objective: Objective | ObjectiveName | None = None,
    mechanism: MechanismKind | None = None,
    rng: SecureRandom | None = None,
    objective_examples: int | None = None,
) -> LabelRelease:
    """Privatize ``labels`` with total budget ``epsilon`` (Algorithm 3).

    ``epsilon_prior`` is the part spent on the prior; by default ``default_prior_epsilon``, which
    depends only on ``epsilon``, the support size ``k`` and the number of examples ``n`` (public:
    the message lists every example ID of the declared universe, labelled or not). Labels are
    clipped to the support's range and snapped to it first; the support is public and never derived
    from the labels. Under the ``"zero_one"`` loss the labels are classes ``0..C-1`` (the support) and
    the mechanism is RR-Top-k; under any other loss it is RR-on-Bins. ``objective``: ``label`` (the
    per-label loss) or ``model`` (a model trained on the ``n`` released labels, with a declared
    capacity; ``labeldp.mechanisms.objective``), by default the loss's (``default_objective``): the
    bins follow from public quantities and the noisy prior either way, so the release stays
    (ε₁ + ε₂)-DP. ``mechanism``: ``rr_on_bins``, ``rr_top_k`` or ``unbiased`` (the least-variance
    unbiased randomizer, squared and Poisson loss), by default ``default_mechanism``'s choice (public
    quantities only) — or the loss's RR kind when ``objective`` is named, since it applies to those.
    ``objective_examples``: how many labels the model objective's model learns from (public), by
    default these ``labels``' count — a feature-aware release's examples without a group name all of
    the release's.
    """
    eps = check_epsilon(epsilon)
    sup = as_support(support)
    loss_spec = resolve_loss(loss)
    y = _checked_labels(labels, sup, loss_spec)
    eps_prior, eps_randomize = prior_split(eps, y.size, sup.k, epsilon_prior)
    if not isinstance(loss, str):  # a callable loss: RR-on-Bins optimized for it
        kind: MechanismKind = mechanism_kind(loss_spec.name, mechanism or "rr_on_bins")
    elif mechanism is None and objective is None:
        kind = default_mechanism(loss_spec.name, eps_randomize, y.size, sup.k)
    elif mechanism is None:  # an objective belongs to the RR kinds: asking for one asks for them
        kind = mechanism_kind(loss_spec.name)
    else:
        kind = mechanism_kind(loss_spec.name, mechanism)
    check_mechanism_epsilon(kind, eps_randomize)
    at = (
        None
        if kind == "unbiased"
        else Objective.of(objective, loss_spec.name, eps_randomize).epsilon_for(
            eps_randomize, y.size if objective_examples is None else objective_examples
        )
    )
    stream = rng or SecureRandom()
    prior = private_prior(y, sup, eps_prior, rng=stream)
    if isinstance(loss, str):
        chosen = optimal_mechanism(sup, prior, eps_randomize, loss, optimize_at=at, kind=kind)
    else:
        chosen = optimize_rr_on_bins(sup, prior, eps_randomize, loss_spec, optimize_at=at)
    bins = chosen.randomize(y, rng=stream)
    return LabelRelease(chosen, prior, bins, eps_prior, eps_randomize, eps)


def _checked_labels(labels: ArrayLike, support: Support, loss: Loss) -> FloatArray:
    if mechanism_kind(loss.name) == "rr_top_k":
        y = class_labels(labels, support.k).astype(np.float64)
        if y.size == 0:
            raise ParameterError("labels must not be empty", "labels")
        return y
    y = finite_vector(labels, "labels")
    check_labels_for_loss(y, loss, "labels")
    return y


def release_user_labels(
    labels: ArrayLike,
    user_keys: ArrayLike,
    example_keys: ArrayLike,
    support: Support | ArrayLike,
    epsilon_user: float,
    loss: LossName,
    contribution_bound: int | BoundRule,
    *,
    salt: int,
    epsilon_prior: float | None = None,
    epsilon_bound: float | None = None,
    bound_quantile: float = DEFAULT_BOUND_QUANTILE,
    max_bound: int = DEFAULT_MAX_BOUND,
    objective: Objective | ObjectiveName | None = None,
    rng: SecureRandom | None = None,
) -> LabelRelease:
    """Privatize ``labels`` with ``epsilon_user`` per user (``labeldp.mechanisms.user_level``).

    ``contribution_bound`` is τ, or ``"auto"`` (the τ that minimizes the expected loss under the noisy
    prior), or ``"private"`` (an ``epsilon_bound``-DP ``bound_quantile`` of the per-user counts). A
    given τ is also the prior's bound (τ_p = τ, noise scale 2τ/ε₁); a chosen one is not known when
    the prior is drawn (and must not be: auto chooses it *from* the prior), so the prior's histogram
    keeps one example per user (τ_p = 1, scale 2/ε₁). Examples over the bound get the code ``m`` in
    ``bin_indices`` and are never randomized. ``objective``: as in ``release_labels``, for the
    ``Σ min(c_u, τ)`` kept examples (public: keys and the user map decide them).
    """
    stream = rng or SecureRandom()
    planned = plan_user_release(
        labels,
        user_keys,
        example_keys,
        support,
        epsilon_user,
        loss,
        contribution_bound,
        salt=salt,
        epsilon_prior=epsilon_prior,
        epsilon_bound=epsilon_bound,
        bound_quantile=bound_quantile,
        max_bound=max_bound,
        objective=objective,
        rng=stream,
    )
    mechanism, kept = planned.mechanism, planned.kept
    bins = np.full(kept.size, mechanism.m, dtype=np.int64)
    bins[kept] = mechanism.randomize(planned.labels[kept], rng=stream)
    return planned.release(bins)


@dataclass(frozen=True)
class UserRelease:
    """A user-level release up to its randomization: the labels (checked), the mechanism for the noisy
    prior, which examples are kept (≤ τ per user) and the split. Every draw it made (the prior, a
    private τ) is in it; the kept labels are randomized by the caller."""

    labels: FloatArray
    mechanism: Mechanism
    prior: FloatArray
    kept: npt.NDArray[np.bool_]
    budget: UserBudget

    def release(self, bins: IntArray) -> LabelRelease:
        b = self.budget
        return LabelRelease(
            self.mechanism, self.prior, bins, b.epsilon_prior, b.epsilon_randomize, b.epsilon_user, b
        )


def plan_user_release(
    labels: ArrayLike,
    user_keys: ArrayLike,
    example_keys: ArrayLike,
    support: Support | ArrayLike,
    epsilon_user: float,
    loss: LossName,
    contribution_bound: int | BoundRule,
    *,
    salt: int,
    epsilon_prior: float | None = None,
    epsilon_bound: float | None = None,
    bound_quantile: float = DEFAULT_BOUND_QUANTILE,
    max_bound: int = DEFAULT_MAX_BOUND,
    objective: Objective | ObjectiveName | None = None,
    rng: SecureRandom,
) -> UserRelease:
    """``release_user_labels`` up to the randomization of the kept labels (for a caller that randomizes
    some of them with other mechanisms at the same ε₂: a feature-aware release)."""
    eps_user = check_epsilon(epsilon_user, "epsilon_user")
    sup = as_support(support)
    loss_spec = resolve_loss(loss)
    y = _checked_labels(labels, sup, loss_spec)
    users = np.asarray(user_keys, dtype=np.int64)
    if users.shape != y.shape:
        raise ParameterError("user_keys must have one key per label", "user_keys")
    ranks = contribution_ranks(users, np.asarray(example_keys, dtype=np.int64), salt)
    counts = examples_per_user(users)
    split = plan_user_split(
        eps_user, contribution_bound, counts, sup.k, epsilon_prior=epsilon_prior, epsilon_bound=epsilon_bound
    )
    tau = split.bound
    if contribution_bound == "private":
        tau = private_contribution_bound(
            counts, split.epsilon_bound, quantile=bound_quantile, max_bound=max_bound, rng=rng
        )
    in_prior = ranks < split.prior_bound
    prior = private_prior(
        y[in_prior], sup, split.epsilon_prior, contribution_bound=split.prior_bound, rng=rng
    )
    if tau is None:  # auto: post-processing of the noisy prior and the (non-label) counts
        left = Fraction(eps_user) - Fraction(split.epsilon_bound) - Fraction(split.epsilon_prior)
        tau = choose_contribution_bound(counts, sup, prior, float_at_most(left), loss).bound
    budget = split.for_bound(tau)
    kept = ranks < tau
    # the loss's own default objective (ε₂ follows from τ, which may be chosen only now)
    at = Objective.of(objective, loss_spec.name).epsilon_for(budget.epsilon_randomize, int(kept.sum()))
    mechanism = optimal_mechanism(sup, prior, budget.epsilon_randomize, loss, optimize_at=at)
    return UserRelease(y, mechanism, prior, kept, budget)


def release_classes(
    labels: ArrayLike,
    num_classes: int,
    epsilon: float,
    epsilon_prior: float | None = None,
    *,
    objective: Objective | ObjectiveName | None = None,
    rng: SecureRandom | None = None,
) -> LabelRelease:
    """Categorical labels ``0..num_classes-1``: a private class prior (ε₁), then RR-Top-k for it (ε₂)."""
    if int(num_classes) != num_classes or num_classes < 1:
        raise ParameterError(f"num_classes must be a positive integer, got {num_classes!r}", "num_classes")
    classes = explicit_support(np.arange(int(num_classes), dtype=np.float64))
    return release_labels(labels, classes, epsilon, "zero_one", epsilon_prior, objective=objective, rng=rng)
