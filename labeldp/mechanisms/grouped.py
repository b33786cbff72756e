"""Feature-aware releases: one mechanism per group of examples, each optimal for its group's prior.

The features party groups the examples by what its model predicts from their features and gives
each group a prior on the support (``labeldp.priors``); the labels party then randomizes every label of
a group with the mechanism optimal for that group's prior (RR-on-Bins, or RR-Top-k for classes — the
RRWithPrior of the label-DP classification literature) at the whole ε: the prior is given, not
estimated, so no ε₁ is spent for these examples. Examples without a group (not priced, or new) fall
back to a release of their own as today (``release_labels``: a private prior on their labels at ε₁,
the mechanism optimal for it at ε₂).

Why this is ε-label-DP (docs/math.md §14): a group mechanism is ε-DP for *any* prior, and an example's
group and its group's prior are functions of features and of earlier DP outputs, never of the
example's own label; its label enters nothing but its own output (the fallback's private prior counts
fallback labels only). So a hostile or wrong prior can cost accuracy, never privacy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.debias import target_error
from labeldp.mechanisms.epsilon import UserBudget
from labeldp.mechanisms.factory import default_mechanism, mechanism_kind, optimal_mechanism
from labeldp.mechanisms.losses import LossName, resolve_loss
from labeldp.mechanisms.mechanism import Mechanism, MechanismKind
from labeldp.mechanisms.objective import Objective, ObjectiveName, effective_examples
from labeldp.mechanisms.prior import prior_split
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.release import LabelRelease, _checked_labels, plan_user_release, release_labels
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.support import Support, as_support
from labeldp.mechanisms.user_level import BoundRule
from labeldp.mechanisms.validation import ParameterError, check_epsilon

NO_GROUP = -1
# A release's groups travel with their priors in one signed header: at most this many groups, and at
# most this many G × k prior masses (the features party's pricing and the receiver bound them alike).
MAX_GROUPS = 1024
MAX_GROUP_CELLS = 262_144


@dataclass(frozen=True)
class GroupedRelease:
    """What a feature-aware release produced: per example its group (``NO_GROUP``: the fallback) and
    its output bin under its group's (or the fallback's) mechanism."""

    groups: IntArray
    bin_indices: IntArray
    group_mechanisms: list[Mechanism]
    group_priors: FloatArray  # G × k, rows sum to 1
    fallback: LabelRelease | None  # the examples without a group, released as one release
    fallback_mechanism: Mechanism  # ``fallback.mechanism``, or (no fallback example) the uniform prior's
    epsilon: float
    user: UserBudget | None = None  # user-level: the split every example shares (its ε₁ included)

    def published(self) -> PublishedMechanism:
        """The fallback's mechanism with its noisy prior (the release's ``mechanism``); without a
        fallback example, the mechanism optimal for the uniform prior (public), which no example used."""
        if self.fallback is not None:
            return self.fallback.published()
        k = self.fallback_mechanism.support.k
        uniform = np.full(k, 1.0 / k)
        return self.fallback_mechanism.describe(prior=uniform, epsilon_prior=0.0, epsilon_total=self.epsilon)

    def published_groups(self) -> list[PublishedMechanism]:
        """Each group's mechanism and the group's prior: at the whole ε with no ε₁ (example level), or
        at the release's ε₂ stating its ε₁ (user level: every kept label feeds the noisy prior)."""
        eps_prior = 0.0 if self.user is None else self.user.epsilon_prior
        return [
            m.describe(prior=p, epsilon_prior=eps_prior, epsilon_total=self.epsilon, user=self.user)
            for m, p in zip(self.group_mechanisms, self.group_priors, strict=True)
        ]

    @property
    def noisy_labels(self) -> FloatArray:
        """Each example's output value under the mechanism that released it."""
        out = np.full(self.bin_indices.size, np.nan)  # NaN: over a user-level release's bound
        fallback = (self.groups == NO_GROUP) & (self.bin_indices < self.fallback_mechanism.m)
        out[fallback] = self.fallback_mechanism.values_of(self.bin_indices[fallback])
        for g, mechanism in enumerate(self.group_mechanisms):
            at = self.groups == g
            out[at] = mechanism.values_of(self.bin_indices[at])
        return out


def release_grouped_labels(
    labels: ArrayLike,
    groups: ArrayLike,
    group_priors: ArrayLike,
    support: Support | ArrayLike,
    epsilon: float,
    loss: str = "squared",
    epsilon_prior: float | None = None,
    *,
    objective: Objective | ObjectiveName | None = None,
) -> GroupedRelease:
    """Randomize every label once: with its group's mechanism at ``epsilon`` (``groups[i]`` in
    ``0..G−1``), or ``NO_GROUP`` examples as one ordinary release of their own (``epsilon_prior`` its
    ε₁). ``objective``: the release's, for every mechanism — each group's is optimized at the ε it
    derives from all the release's examples (one model trains on them together). Charging is the
    caller's job, before this call."""
    eps = check_epsilon(epsilon)
    sup = as_support(support)
    loss_spec = resolve_loss(loss)
    y = _checked_labels(labels, sup, loss_spec)
    g = _checked_groups(groups, group_priors, y.size, sup.k)
    priors = np.asarray(group_priors, dtype=np.float64)
    bins = np.empty(y.size, dtype=np.int64)
    fallback_at = g == NO_GROUP
    fallback: LabelRelease | None = None
    resolved = Objective.of(objective, loss_spec.name, eps)  # one, at the groups' (whole) ε, for all
    at = resolved.epsilon_for(eps, y.size)  # one model learns from all
    if fallback_at.any():
        fallback = release_labels(  # the loss's RR kind, as every group's (no unbiased fallback)
            y[fallback_at],
            sup,
            eps,
            loss,
            epsilon_prior,
            objective=resolved,
            objective_examples=y.size,
            mechanism=mechanism_kind(loss_spec.name),
        )
        bins[fallback_at] = fallback.bin_indices
        fallback_mechanism = fallback.mechanism
    else:
        fallback_mechanism = optimal_mechanism(
            sup, np.full(sup.k, 1.0 / sup.k), eps, loss_spec.name, optimize_at=at
        )
    mechanisms = _randomize_groups(y, g, priors, sup, eps, loss_spec.name, bins, at)
    normalized = priors / priors.sum(axis=1, keepdims=True)
    return GroupedRelease(g, bins, mechanisms, normalized, fallback, fallback_mechanism, eps)


def release_grouped_user_labels(
    labels: ArrayLike,
    groups: ArrayLike,
    group_priors: ArrayLike,
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
    objective: Objective | ObjectiveName | None = None,
) -> GroupedRelease:
    """A user-level release with priors: the bounding, the noisy prior (every kept label, τ_p per user)
    and the split exactly as ``release_user_labels``; a kept example with a group is randomized by its
    group's mechanism at the same ε₂, the others by the release's. Examples over the bound carry the
    release mechanism's code ``m`` and no group."""
    stream = SecureRandom()
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
        objective=objective,
        rng=stream,
    )
    sup = as_support(support)
    y, kept, mechanism = planned.labels, planned.kept, planned.mechanism
    g = np.where(kept, _checked_groups(groups, group_priors, y.size, sup.k), NO_GROUP)
    priors = np.asarray(group_priors, dtype=np.float64)
    bins = np.full(y.size, mechanism.m, dtype=np.int64)
    plain = kept & (g == NO_GROUP)
    bins[plain] = mechanism.randomize(y[plain], rng=stream)
    eps2 = planned.budget.epsilon_randomize
    loss_name = resolve_loss(loss).name
    at = Objective.of(objective, loss_name).epsilon_for(eps2, int(kept.sum()))  # user level: the loss's
    mechanisms = _randomize_groups(y, g, priors, sup, eps2, loss_name, bins, at)
    normalized = priors / priors.sum(axis=1, keepdims=True)
    fallback = planned.release(bins)
    return GroupedRelease(
        g, bins, mechanisms, normalized, fallback, mechanism, planned.budget.epsilon_user, planned.budget
    )


@dataclass(frozen=True)
class Without:
    """What a release without priors would use: its mechanism kind and objective, its split of ε, and
    the examples its objective counts."""

    mechanism: MechanismKind
    objective: Objective
    epsilon_prior: float
    epsilon_randomize: float
    examples: int


@dataclass(frozen=True)
class PriorsVerdict:
    """Whether priors are expected to train a better model than the same examples released without
    them (docs/math.md §14, "When priors pay"): each side's error of a model trained on the rows, as
    the model objective counts it (§12) — the binning error, a bias more rows never remove, plus the
    targets' variance over the effective sample size ``n / capacity`` — under the priors: the grouped
    side each group's mechanism under its own prior, the other the mechanism those examples would get
    without priors (the default kind, at its ε₂ after the private prior's ε₁) under the priors pooled.
    Public inputs only: the priors, the group sizes, ε, the loss, the support and the capacity — no
    label."""

    with_priors: float
    without_priors: float
    mechanism_without: MechanismKind

    @property
    def pays(self) -> bool:
        return self.with_priors < self.without_priors


def priors_verdict(
    group_priors: ArrayLike,
    sizes: ArrayLike,
    support: Support | ArrayLike,
    epsilon: float,
    loss: str = "squared",
    *,
    objective: Objective | ObjectiveName | None = None,
    examples: int | None = None,
    without: Without | None = None,
    mechanisms: Sequence[Mechanism | None] | None = None,
) -> PriorsVerdict:
    """The ``PriorsVerdict`` of releasing ``sizes[g]`` examples in each group ``g`` at ``epsilon``.
    ``objective``: the groups' (``release_grouped_labels``'s), over ``examples`` (the release's, by
    default the grouped ones); ``without``: what a release of the same request without priors would
    use, by default the default kind and objective at the default split; ``mechanisms``: each group's,
    where the caller optimized them already (as here: at ``objective``'s ε over ``examples``)."""
    eps = check_epsilon(epsilon)
    sup = as_support(support)
    loss_name = resolve_loss(loss).name
    priors = np.asarray(group_priors, dtype=np.float64)
    counts = np.asarray(sizes, dtype=np.float64)
    if priors.ndim != 2 or priors.shape != (counts.size, sup.k) or counts.sum() <= 0 or np.any(counts < 0):
        raise ParameterError("one prior of k masses and one example count ≥ 0 per group, some > 0", "sizes")
    priors = priors / priors.sum(axis=1, keepdims=True)
    n = int(counts.sum())
    resolved = Objective.of(objective, loss_name, eps)
    at = resolved.epsilon_for(eps, examples if examples is not None else n)
    effective = effective_examples(n, resolved.model_capacity)
    grouped = 0.0
    for g, (p, size) in enumerate(zip(priors, counts, strict=True)):
        if size > 0:
            given = None if mechanisms is None else mechanisms[g]
            mechanism = optimal_mechanism(sup, p, eps, loss_name, optimize_at=at) if given is None else given
            grouped += size * model_error(mechanism.describe(prior=p, epsilon_prior=0.0), effective)
    pooled = counts @ priors / counts.sum()
    if without is None:
        eps_prior, eps_randomize = prior_split(eps, n, sup.k)
        kind = default_mechanism(loss_name, eps_randomize, n, sup.k)
        without = Without(kind, Objective.of(None, loss_name, eps_randomize), eps_prior, eps_randomize, n)
    kind, eps_prior, eps_randomize = without.mechanism, without.epsilon_prior, without.epsilon_randomize
    own_at = None if kind == "unbiased" else without.objective.epsilon_for(eps_randomize, without.examples)
    own = optimal_mechanism(sup, pooled, eps_randomize, loss_name, optimize_at=own_at, kind=kind)
    plain = model_error(own.describe(prior=pooled, epsilon_prior=eps_prior), effective)
    return PriorsVerdict(float(grouped / n), float(plain), kind)


def model_error(mechanism: PublishedMechanism, effective: float) -> float:
    """Under the mechanism's prior: the binning error ``E[(Φ(y) − y)²]`` (RR-on-Bins only; the other
    kinds have no bins: all their error counts as variance) plus the rest of ``target_error`` — the
    targets' variance around ``Φ(y)`` — over ``effective`` examples."""
    total = target_error(mechanism)
    if mechanism.kind != "rr_on_bins":
        return total / effective
    s = np.asarray(mechanism.support, dtype=np.float64)
    p = np.asarray(mechanism.prior, dtype=np.float64)
    phi = np.asarray(mechanism.bin_values, dtype=np.float64)[np.asarray(mechanism.support_bins)]
    binning = float(np.dot(p / p.sum(), (phi - s) ** 2))
    return binning + max(total - binning, 0.0) / effective


def _checked_groups(groups: ArrayLike, group_priors: ArrayLike, n: int, k: int) -> IntArray:
    g = np.asarray(groups, dtype=np.int64)
    priors = np.asarray(group_priors, dtype=np.float64)
    if g.shape != (n,):
        raise ParameterError("groups needs one entry per label", "groups")
    if priors.ndim != 2 or priors.shape[1] != k:
        raise ParameterError("group_priors needs one row of k masses per group", "group_priors")
    if g.size and (g.min() < NO_GROUP or g.max() >= priors.shape[0]):
        raise ParameterError(f"groups must lie in -1..{priors.shape[0] - 1}", "groups")
    return g


def _randomize_groups(
    y: FloatArray,
    g: IntArray,
    priors: FloatArray,
    support: Support,
    epsilon: float,
    loss: str,
    bins: IntArray,
    optimize_at: float | None,
) -> list[Mechanism]:
    """Each group's optimal mechanism at ``epsilon`` (optimized at ``optimize_at``: the release's
    objective, as its own mechanism is — the model trains on every group's examples together); its
    members' ``bins`` drawn with it (a fresh CSPRNG stream per group). Group ``NO_GROUP`` is left as
    it is."""
    mechanisms = [optimal_mechanism(support, p, epsilon, loss, optimize_at=optimize_at) for p in priors]
    order = np.argsort(g, kind="stable")
    starts = np.searchsorted(g[order], np.arange(priors.shape[0] + 1))
    for j, mechanism in enumerate(mechanisms):
        at = order[starts[j] : starts[j + 1]]
        if at.size:
            bins[at] = mechanism.randomize(y[at])
    return mechanisms
