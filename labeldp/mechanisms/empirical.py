"""The empirical side of what an attacker learns: the Bayes-optimal attack run on realized outputs,
and a lower bound on the ε a sampler implements from canaries (Clopper–Pearson), which holds whatever
the sampler does — the black-box check that catches a sampler spending more than it claims
(docs/math.md §11). The exact numbers these estimate are in ``advantage.py``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.advantage import BoolArray, bin_of_target, target_prior, targets_of
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.validation import ParameterError


@dataclass(frozen=True)
class Attack:
    """An attack on realized outputs scored against the true targets."""

    right_without: BoolArray  # the prior's best guess was the true target
    right_with: BoolArray  # the posterior's best guess (prior × the released bin) was
    multiplicative: FloatArray  # the odds shift the realized output caused (max over target pairs)

    def summary(self, alpha: float = 0.05) -> dict[str, float]:
        n = int(self.right_with.size)
        with_, without = int(self.right_with.sum()), int(self.right_without.sum())
        lo_w, hi_w = wilson(with_, n, alpha)
        lo_o, hi_o = wilson(without, n, alpha)
        return {
            "examples": float(n),
            "accuracy_without_release": without / n,
            "accuracy_with_release": with_ / n,
            "additive_advantage": (with_ - without) / n,
            "additive_advantage_low": lo_w - hi_o,  # conservative (Bonferroni-free) interval
            "additive_advantage_high": hi_w - lo_o,
            "multiplicative_max": float(self.multiplicative.max()),
            "multiplicative_p50": float(np.quantile(self.multiplicative, 0.5)),
            "alpha": alpha,
        }


def attack(
    published: PublishedMechanism, target_prior_rows: ArrayLike, outputs: ArrayLike, truth: ArrayLike
) -> Attack:
    """Score the Bayes-optimal attack on realized outputs: ``target_prior_rows`` is the attacker's
    ``P(target | x)`` per example (``n × targets``), ``outputs`` the released bins, ``truth`` the true
    targets (``targets_of`` of the true labels)."""
    q = np.asarray(target_prior_rows, dtype=np.float64)
    z = np.asarray(outputs, dtype=np.int64)
    y = np.asarray(truth, dtype=np.int64)
    n_targets = int(targets_of(published).max()) + 1
    if q.ndim != 2 or q.shape[1] != n_targets or z.shape != (q.shape[0],) or y.shape != z.shape:
        raise ParameterError(f"need n × {n_targets} prior rows, n outputs and n true targets", "prior")
    if z.size and (z.min() < 0 or z.max() >= published.m or y.min() < 0 or y.max() >= n_targets):
        raise ParameterError("outputs must be bins and truth must be targets of this mechanism", "truth")
    likelihood = _likelihood(published, z)  # n × targets: P(z_n | t)
    posterior = q * likelihood
    possible = q > 0
    with np.errstate(divide="ignore"):
        log_l = np.log(likelihood)
    hi = np.where(possible, log_l, -np.inf).max(axis=1)
    lo = np.where(possible, log_l, np.inf).min(axis=1)
    mult = np.where(possible.sum(axis=1) >= 2, hi - lo, 0.0)
    return Attack(q.argmax(axis=1) == y, posterior.argmax(axis=1) == y, mult)


def _likelihood(published: PublishedMechanism, z: IntArray) -> FloatArray:
    """``P(z_n | t)`` for every target (``n × targets``)."""
    if published.kind == "unbiased":
        return np.asarray(published.transition_matrix()[:, z].T)
    t = published.threshold
    bins = bin_of_target(published)
    out = np.where(bins[None, :] == z[:, None], t.keep_probability, t.move_probability)
    return np.where(bins[None, :] < 0, 1.0 / published.m, out)


def decision_rule(published: PublishedMechanism, prior: ArrayLike) -> IntArray:
    """The target the Bayes-optimal attacker with one shared ``prior`` (over the support) guesses for
    each output bin, and (last entry) its guess without the release."""
    q = target_prior(published, prior)
    likelihood = _likelihood(published, np.arange(published.m, dtype=np.int64))  # m × targets
    return np.append((q * likelihood).argmax(axis=1), q[0].argmax())


def targets_from_noisy_model(
    published: PublishedMechanism, noisy_bin_probs: ArrayLike, floor: float = 0.0
) -> FloatArray:
    """The attacker's ``P(target | x)`` from a model of ``P(released bin | x)``: RR over bins is
    invertible, ``P(bin) = (P(z = bin) − l)/(h − l)``, clipped at 0 and renormalized (RR-on-Bins;
    for RR-Top-k the unreported classes, which the release never names, get nothing). ``floor`` keeps
    every bin possible (a model's estimate should not make an attacker certain)."""
    g = np.asarray(noisy_bin_probs, dtype=np.float64)
    m = published.m
    if g.ndim != 2 or g.shape[1] != m:
        raise ParameterError(f"need one probability per bin ({m})", "noisy_bin_probs")
    if published.kind == "unbiased":  # P(z | x) = p(x)ᵀT: the least-squares p, clipped and renormalized
        transition = published.transition_matrix()
        p = np.clip(g @ np.linalg.pinv(transition), floor, None)
        return np.asarray(p / np.maximum(p.sum(axis=1, keepdims=True), 1e-300))
    t = published.threshold
    h, l_ = t.keep_probability, t.move_probability
    uninformative = m == 1 or h <= l_
    bins = np.full_like(g, 1.0 / m) if uninformative else np.clip((g - l_) / (h - l_), floor, None)
    bins /= np.maximum(bins.sum(axis=1, keepdims=True), 1e-300)
    if published.kind == "rr_on_bins":
        return bins
    classes = np.zeros((g.shape[0], len(published.support)))
    at = bin_of_target(published)
    classes[:, at >= 0] = bins[:, at[at >= 0]]
    return classes


def wilson(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided Wilson score interval at level ``1 − alpha``."""
    if n == 0:
        return 0.0, 1.0
    from scipy import stats  # here, not at the top: it adds about 0.4 s to every service start

    ci = stats.binomtest(int(successes), int(n)).proportion_ci(1 - alpha, method="wilson")
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class EpsilonBound:
    """A Clopper–Pearson lower bound on the ε a mechanism implements, from canaries."""

    epsilon_low: float  # at most the sampler's true ε with probability >= 1 − alpha, whatever it does
    alpha: float
    canaries: int
    rates: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return {"epsilon_low": self.epsilon_low, "alpha": self.alpha, "canaries": self.canaries, **self.rates}


def epsilon_lower_bound(
    published: PublishedMechanism, truth: ArrayLike, outputs: ArrayLike, alpha: float = 1e-6
) -> EpsilonBound:
    """From canaries with known labels and their released bins: for the two most common true bins
    ``a`` and ``b``, the event "output = a" has probability ``h`` under ``a`` and ``l`` under ``b``, so
    ``ε >= log(h/l)`` is tested one-sidedly with Clopper–Pearson bounds (``alpha`` split four ways:
    two rates, two directions). With probability ``>= 1 − alpha`` the result is at most the ε the
    sampler really implements — whatever the sampler does, broken or not. ``truth`` holds the
    canaries' targets (``targets_of`` their labels' support points)."""
    targets = np.asarray(truth, dtype=np.int64)
    z = np.asarray(outputs, dtype=np.int64)
    if targets.shape != z.shape or targets.ndim != 1:
        raise ParameterError("truth and outputs must be two vectors of the same length", "outputs")
    if published.kind == "unbiased":
        return _unbiased_epsilon_lower_bound(published, targets, z, alpha)
    bin_of = bin_of_target(published)
    if targets.size and (targets.min() < 0 or targets.max() >= bin_of.size):
        raise ParameterError("truth must be targets of this mechanism (targets_of)", "truth")
    y = bin_of[targets]  # each canary's own bin (-1: a class RR-Top-k does not report)
    if not 0 < alpha < 1:
        raise ParameterError("alpha must be in (0, 1)", "alpha")
    bins, counts = np.unique(y[y >= 0], return_counts=True)
    if bins.size < 2:
        raise ParameterError("canaries need labels in at least two different bins", "truth")
    a, b = (int(v) for v in bins[np.argsort(-counts, kind="stable")[:2]])
    best, rates = 0.0, {}
    for own, other in ((a, b), (b, a)):
        n_own, n_other = int((y == own).sum()), int((y == other).sum())
        hits_own, hits_other = int(((y == own) & (z == own)).sum()), int(((y == other) & (z == own)).sum())
        low = _clopper_pearson(hits_own, n_own, alpha / 4)[0]
        high = _clopper_pearson(hits_other, n_other, alpha / 4)[1]
        rates[f"p_{own}_given_{own}"] = hits_own / n_own
        rates[f"p_{own}_given_{other}"] = hits_other / n_other
        if low > 0 and high > 0:
            best = max(best, math.log(low / high))
        elif low > 0:
            best = math.inf
    return EpsilonBound(max(best, 0.0), alpha, int(y.size), rates)


def _unbiased_epsilon_lower_bound(
    published: PublishedMechanism, targets: IntArray, z: IntArray, alpha: float
) -> EpsilonBound:
    """The same test for the unbiased randomizer, whose outputs name no target: for the two most
    common true support points ``a`` and ``b``, the event is "the output is one the published rows
    make likelier under ``a`` than under ``b``" — fixed by the published mechanism before any output is
    seen, so the bound holds whatever the sampler does."""
    k = len(published.support)
    if targets.size and (targets.min() < 0 or targets.max() >= k):
        raise ParameterError("truth must be support points of this mechanism (targets_of)", "truth")
    if not 0 < alpha < 1:
        raise ParameterError("alpha must be in (0, 1)", "alpha")
    points, counts = np.unique(targets, return_counts=True)
    if points.size < 2:
        raise ParameterError("canaries need labels in at least two different support points", "truth")
    a, b = (int(v) for v in points[np.argsort(-counts, kind="stable")[:2]])
    rows = published.unbiased_weights().table
    best, rates = 0.0, {}
    for own, other in ((a, b), (b, a)):
        event = rows[own] > rows[other]  # outputs likelier under own
        n_own, n_other = int((targets == own).sum()), int((targets == other).sum())
        hits_own = int(((targets == own) & event[z]).sum())
        hits_other = int(((targets == other) & event[z]).sum())
        low = _clopper_pearson(hits_own, n_own, alpha / 4)[0]
        high = _clopper_pearson(hits_other, n_other, alpha / 4)[1]
        rates[f"p_event_{own}_given_{own}"] = hits_own / n_own
        rates[f"p_event_{own}_given_{other}"] = hits_other / n_other
        if low > 0 and high > 0:
            best = max(best, math.log(low / high))
        elif low > 0:
            best = math.inf
    return EpsilonBound(max(best, 0.0), alpha, int(targets.size), rates)


def _clopper_pearson(successes: int, n: int, alpha_each_side: float) -> tuple[float, float]:
    """One-sided Clopper–Pearson ("exact") bounds, each holding with probability ``1 − alpha_each_side``."""
    level = 1 - alpha_each_side
    from scipy import stats  # here, not at the top: it adds about 0.4 s to every service start

    low = stats.binomtest(successes, n, alternative="greater").proportion_ci(level, method="exact").low
    high = stats.binomtest(successes, n, alternative="less").proportion_ci(level, method="exact").high
    return float(low), float(high)
