"""User-level label privacy: bound each user's contribution, calibrate ε per user, choose the bound.

Label-DP protects one example's label. A user who clicked ``c`` times has ``c`` labels in a release,
so an example-level ε protects that person only at ``c·ε`` (group privacy). Under **user-level**
adjacency two datasets are neighbours when *all* labels of one user differ, and:

* **Contribution bounding.** Each user keeps at most ``τ`` examples: the ``τ`` with the smallest
  salted hash of their example keys. The choice is a function of the example IDs, the user map and a
  per-release salt — never of the labels — so the kept set is identical under any change of labels,
  and the kept sets for ``τ`` and ``τ' > τ`` are nested.
* **Calibration.** A histogram over examples of which each user contributes at most ``τ_p`` moves by
  at most ``2·τ_p`` in L1 when one user's labels change, so discrete Laplace noise of scale
  ``2·τ_p/ε₁`` makes the prior ε₁-DP per user. Randomizing each of a user's at most ``τ`` kept labels
  at ε₂ costs ``τ·ε₂`` by basic composition, and choosing ``τ`` privately costs ``ε_τ``. One release
  costs a user ``ε_τ + ε₁ + τ·ε₂ <= ε_user``, checked as exact rationals.
* **Per example**, a kept label moves the histogram by 2 (``ε₁/τ_p``) and is randomized once (ε₂).

Examples over the bound carry no information about their labels; the release still lists them (with
``CAPPED``), so the set of IDs reveals nothing about which examples were kept or labelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from labeldp.mechanisms._types import FloatArray, IntArray
from labeldp.mechanisms.epsilon import UserBudget, float_at_most
from labeldp.mechanisms.factory import optimal_mechanism
from labeldp.mechanisms.losses import LossName
from labeldp.mechanisms.rng import SecureRandom
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import Support
from labeldp.mechanisms.validation import ParameterError, check_epsilon

Keys = npt.NDArray[np.int64]
BoundRule = Literal["auto", "private"]
DEFAULT_BOUND_QUANTILE = 0.9
DEFAULT_MAX_BOUND = 1000  # candidates for a privately chosen bound: 1..this (public)
MAX_AUTO_CANDIDATES = 24
_M1, _M2, _M3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


# -- contribution bounding -------------------------------------------------------------------------
def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finalizer: a bijection of 64-bit words that scatters nearby keys."""
    z = x + _M1
    z = (z ^ (z >> np.uint64(30))) * _M2
    z = (z ^ (z >> np.uint64(27))) * _M3
    return np.asarray(z ^ (z >> np.uint64(31)), dtype=np.uint64)


def contribution_ranks(user_keys: Keys, example_keys: Keys, salt: int) -> IntArray:
    """Each example's rank among its user's examples (0 first) by salted hash of its example key.

    ``rank < τ`` is the kept set for bound ``τ``. Only keys and the salt enter: permuting the input
    permutes the ranks with it, and no label can change them.
    """
    users = np.asarray(user_keys, dtype=np.int64)
    examples = np.asarray(example_keys, dtype=np.int64)
    if users.shape != examples.shape or users.ndim != 1:
        raise ParameterError("user_keys and example_keys must be 1-D and aligned", "user_keys")
    salt_word = _mix(np.array([salt & (2**64 - 1)], dtype=np.uint64))[0]
    hashed = _mix(examples.view(np.uint64) ^ salt_word)
    order = np.lexsort((hashed, users))
    n = users.size
    ranks = np.empty(n, dtype=np.int64)
    if n:
        sorted_users = users[order]
        starts = np.r_[True, sorted_users[1:] != sorted_users[:-1]]
        first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
        ranks[order] = np.arange(n) - first
    return ranks


def examples_per_user(user_keys: Keys) -> IntArray:
    """How many examples each distinct user has (order of users unspecified)."""
    return np.unique(np.asarray(user_keys, dtype=np.int64), return_counts=True)[1].astype(np.int64)


def kept_examples(counts: IntArray, bound: int) -> int:
    """How many examples a bound keeps: ``Σ min(c_u, τ)``."""
    return int(np.minimum(counts, bound).sum())


# -- calibration -----------------------------------------------------------------------------------
def default_user_prior_epsilon(available: float, prior_bound: int, prior_examples: int, k: int) -> float:
    """ε₁ by the example-level rule applied per example: the prior's per-example ε is ``ε₁/τ_p``, so
    ``ε₁/τ_p = sqrt(k/n_p)``, capped at half of what is available."""
    if prior_examples <= 0 or k <= 0:
        raise ParameterError("the prior needs at least one example and one support point")
    return min(available / 2, prior_bound * math.sqrt(k / prior_examples))


def randomize_epsilon(epsilon_user: float, epsilon_bound: float, epsilon_prior: float, bound: int) -> float:
    """ε₂: the largest double with ``ε_τ + ε₁ + τ·ε₂ <= ε_user`` exactly."""
    left = Fraction(epsilon_user) - Fraction(epsilon_bound) - Fraction(epsilon_prior)
    if left <= 0:
        raise ParameterError("epsilon_prior (and the bound's ε) leave nothing to randomize", "epsilon_prior")
    return check_epsilon(float_at_most(left / bound), "epsilon_randomize")


@dataclass(frozen=True)
class UserSplit:
    """Everything about a user-level release's ε that is known before any noise is drawn."""

    epsilon_user: float
    bound: int | None  # τ when given; None when it is chosen after the prior (auto, private)
    prior_bound: int  # τ_p
    epsilon_bound: float  # ε_τ
    epsilon_prior: float  # ε₁
    max_example_exposure: Fraction  # the most ε any one example can end up exposed to

    def for_bound(self, bound: int) -> UserBudget:
        eps2 = randomize_epsilon(self.epsilon_user, self.epsilon_bound, self.epsilon_prior, bound)
        return UserBudget(
            self.epsilon_user, bound, self.prior_bound, self.epsilon_bound, self.epsilon_prior, eps2
        )


def plan_user_split(
    epsilon_user: float,
    bound: int | BoundRule,
    counts: IntArray,
    k: int,
    *,
    epsilon_prior: float | None = None,
    epsilon_bound: float | None = None,
) -> UserSplit:
    """The split of ``epsilon_user`` for a bound that is given (τ_p = τ) or chosen (τ_p = 1, and for
    ``private`` ``ε_τ``, default a tenth of ``epsilon_user``); checks that something is left to
    randomize. ``counts``: examples per user."""
    eps_user = check_epsilon(epsilon_user, "epsilon_user")
    if bound in ("auto", "private"):
        prior_bound, given = 1, None
        eps_bound = 0.0
        if bound == "private":
            eps_bound = check_epsilon(
                eps_user / 10 if epsilon_bound is None else epsilon_bound, "epsilon_bound"
            )
    elif isinstance(bound, int) and not isinstance(bound, bool):
        if bound < 1:
            raise ParameterError("contribution_bound must be at least 1", "contribution_bound")
        prior_bound, given, eps_bound = bound, bound, 0.0
    else:
        raise ParameterError(
            "contribution_bound must be an integer, 'auto' or 'private'", "contribution_bound"
        )
    if epsilon_bound is not None and bound != "private":
        raise ParameterError("epsilon_bound is for a privately chosen bound only", "epsilon_bound")
    if Fraction(eps_bound) >= Fraction(eps_user):
        raise ParameterError("epsilon_bound must be less than epsilon_user", "epsilon_bound")
    available = float_at_most(Fraction(eps_user) - Fraction(eps_bound))
    if epsilon_prior is None:
        epsilon_prior = default_user_prior_epsilon(
            available, prior_bound, kept_examples(counts, prior_bound), k
        )
    eps_prior = check_epsilon(epsilon_prior, "epsilon_prior")
    left = Fraction(eps_user) - Fraction(eps_bound) - Fraction(eps_prior)
    if left <= 0:
        raise ParameterError(
            "epsilon_prior (with epsilon_bound) must be less than epsilon_user", "epsilon_prior"
        )
    if given is not None:
        eps2 = randomize_epsilon(eps_user, eps_bound, eps_prior, given)
        exposure = Fraction(eps_prior) / given + Fraction(eps2)
    else:  # τ >= 1 and τ_p = 1: an example in the prior is exposed to at most ε₁ + (ε_user - ε_τ - ε₁)
        exposure = Fraction(eps_prior) + left
    return UserSplit(eps_user, given, prior_bound, eps_bound, eps_prior, exposure)


# -- choosing τ --------------------------------------------------------------------------------------
def best_constant_loss(support: Support, prior: FloatArray, loss: LossName) -> float:
    """The expected loss of the best label-free guess under the prior (what an example over the bound
    is worth to a model that learns nothing from its label)."""
    values, p = support.values, np.asarray(prior, dtype=np.float64) / float(np.sum(prior))
    if loss == "zero_one":
        return float(1.0 - p.max())
    if loss == "absolute":
        median = values[min(int(np.searchsorted(np.cumsum(p), 0.5)), values.size - 1)]
        return float(np.dot(p, np.abs(values - median)))
    mean = float(np.dot(p, values))
    if loss == "squared":
        return float(np.dot(p, (values - mean) ** 2))
    # poisson deviance ŷ - y log ŷ (up to a term in y alone), minimized at the mean
    guess = max(mean, 1e-12)
    return float(np.dot(p, guess - values * math.log(guess)))


def bound_candidates(counts: IntArray, limit: int = MAX_AUTO_CANDIDATES) -> list[int]:
    """Small bounds one by one, then a geometric ladder and the counts' quantiles up to the largest."""
    top = int(counts.max())
    found = set(range(1, min(top, 8) + 1))
    step = 8.0
    while step < top:
        step *= 1.5
        found.add(min(top, math.ceil(step)))
    found.update(int(q) for q in np.quantile(counts, (0.5, 0.75, 0.9, 0.99)))
    found.add(top)
    ordered = sorted(b for b in found if b >= 1)
    if len(ordered) > limit:  # keep the small ones and an even spread of the rest
        head = ordered[: limit // 2]
        tail = ordered[limit // 2 :]
        picks = np.unique(np.linspace(0, len(tail) - 1, limit - len(head)).round().astype(int))
        ordered = head + [tail[i] for i in picks]
    return ordered


@dataclass(frozen=True)
class BoundChoice:
    bound: int
    candidates: tuple[int, ...]
    expected_losses: tuple[float, ...]  # the release's loss per example (capped: best constant)
    risks: tuple[float, ...]  # what the choice minimizes (see ``choose_contribution_bound``)


def binning_and_noise(mechanism: RROnBins, prior: FloatArray) -> tuple[float, float]:
    """Under the prior: the squared error of the bins themselves (``E(v_bin(y) - y)²``, which no
    amount of data removes) and the variance of an affine-debiased noisy value around its bin's value
    (which averages out over examples)."""
    transition = mechanism.threshold.transition()
    values = mechanism.bin_values
    support_bins = mechanism.support_bins
    p = np.asarray(prior, dtype=np.float64) / float(np.sum(prior))
    binning = float(np.dot(p, (values[support_bins] - mechanism.support.values) ** 2))
    if mechanism.m == 1:
        return binning, 0.0
    threshold = mechanism.threshold
    a = threshold.keep_probability - threshold.move_probability
    if a <= 0:
        return binning, math.inf
    mean = transition @ values
    variance = np.maximum(transition @ values**2 - mean**2, 0.0)
    mass = np.bincount(support_bins, weights=p, minlength=mechanism.m)
    return binning, float(np.dot(mass, variance)) / a**2


def choose_contribution_bound(
    counts: IntArray, support: Support, prior: FloatArray, epsilon_available: float, loss: LossName
) -> BoundChoice:
    """The bound for a model trained on the release, under the (noisy) prior: kept examples are
    randomized at ``ε₂ = ε_available/τ``, capped ones carry nothing.

    For regression it minimizes ``B(ε₂) + V(ε₂)/kept(τ)``: the bins' own error ``B`` stays whatever
    the data, while the debiased noise ``V`` averages out over the ``kept(τ) = Σ min(c_u, τ)`` examples
    a model learns from; ties go to the smaller τ. For classes it minimizes the release's expected loss
    with capped examples at the best constant guess. Both are post-processing of the prior and the
    user → example counts (public data under label-DP: docs/math.md §10.1). ``docs/math.md`` §10 says
    why the first objective, and not the release's loss, decides for regression."""
    n = int(counts.sum())
    constant = best_constant_loss(support, prior, loss)
    candidates: list[int] = []
    losses: list[float] = []
    risks: list[float] = []
    for bound in bound_candidates(counts):
        try:
            eps2 = check_epsilon(float_at_most(Fraction(epsilon_available) / bound), "epsilon_randomize")
            mechanism = optimal_mechanism(support, prior, eps2, loss)
        except ParameterError:
            continue
        kept = kept_examples(counts, bound)
        per_kept = mechanism.expected_loss(support.values, prior)
        candidates.append(bound)
        losses.append((kept * per_kept + (n - kept) * constant) / n)
        if loss == "zero_one":
            risks.append(losses[-1])
        else:
            if not isinstance(mechanism, RROnBins):  # pragma: no cover - regression losses get RR-on-Bins
                raise TypeError(f"user-level regression releases use RR-on-Bins, not {mechanism.kind}")
            binning, noise = binning_and_noise(mechanism, prior)
            risks.append(binning + noise / kept)
    if not candidates:
        raise ParameterError("no contribution bound leaves a usable ε per example", "epsilon_user")
    best = candidates[int(np.argmin(risks))]
    return BoundChoice(best, tuple(candidates), tuple(losses), tuple(risks))


def private_contribution_bound(
    counts: IntArray,
    epsilon: float,
    *,
    quantile: float = DEFAULT_BOUND_QUANTILE,
    max_bound: int = DEFAULT_MAX_BOUND,
    rng: SecureRandom | None = None,
) -> int:
    """An ε-DP ``quantile`` of the per-user example counts (the exponential mechanism over bounds
    ``1..max_bound`` with utility ``-|#{u : c_u <= τ} - q·U|``, sensitivity 1 when one user's count
    changes). The choice is DP; the counts themselves are published by the release anyway (capped
    examples, users) and are public data under label-DP (docs/math.md §10.1)."""
    eps = check_epsilon(epsilon, "epsilon_bound")
    if not 0 < quantile < 1:
        raise ParameterError("the bound's quantile must lie in (0, 1)", "quantile")
    if max_bound < 1:
        raise ParameterError("max_bound must be at least 1", "max_bound")
    sorted_counts = np.sort(np.asarray(counts, dtype=np.int64))
    bounds = np.arange(1, max_bound + 1)
    at_most = np.searchsorted(sorted_counts, bounds, side="right")
    utility = -np.abs(at_most - quantile * sorted_counts.size)
    logits = eps * utility / 2.0
    weights = np.exp(logits - logits.max())
    cdf = np.cumsum(weights) / weights.sum()
    draw = float((rng or SecureRandom()).uniform01(1)[0])
    return int(bounds[min(int(np.searchsorted(cdf, draw, side="right")), bounds.size - 1)])
