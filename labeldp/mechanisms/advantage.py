"""What an attacker learns from a release: exact reconstruction advantages (docs/math.md §11).

The attacker knows the published mechanism and has a prior belief about each example's label (the
noisy prior the message carries, or ``P(y | x)`` from a model on the features). It sees the example's
released bin and guesses the label's **target**: the bin the true label falls in (RR-on-Bins: the
mechanism's own interval of the support) or the class (RR-Top-k). The Bayes-optimal guess for output
``z`` is ``argmax_t P(t)·P(z | t)``, so per example

* **additive advantage** = ``Σ_z max_t P(t)·P(z|t) − max_t P(t)``: how much more often the optimal
  attacker is right after the release than before it;
* **multiplicative advantage** = ``max_{t,t'} |log(P(t|z)/P(t'|z)) − log(P(t)/P(t'))|`` over targets
  the attacker thinks possible, for the worst output ``z`` (and its expectation over ``z``): how far
  one release can move the attacker's odds; never above the implemented ε;
* **trusts**: following the noisy label is an optimal guess for every output;
* regression only, **MSE reduction** ``Var(y) − E_z Var(y | z)``: how much the release shrinks the
  attacker's squared error in estimating the label value itself (the posterior mean).

Both RR mechanisms are randomized response over bins (keep ``h``, move ``l``; a class outside
RR-Top-k's reported set gets a uniform bin), so every quantity here costs ``O(n·(k + m))``: no ``k × m``
matrix is ever formed. ``channel_advantages`` computes the same numbers for any finite channel (a
baseline's, or a test's) — and for the unbiased randomizer, whose target is the support point itself
(its outputs are not labels), from its exact integer rows, in ``O(n·k·m)`` (in blocks).

The data-independent worst cases — ``h − 1/m`` for the additive advantage over every prior (attained
by a uniform prior over the bins), the implemented ε for the multiplicative one — are properties of
the mechanism itself: ``PublishedMechanism.worst_case_additive_advantage`` and
``max_multiplicative_advantage``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.published import PublishedMechanism
from labeldp.mechanisms.validation import ParameterError

BoolArray = npt.NDArray[np.bool_]
_CHUNK_CELLS = 1 << 22  # rows × bins per vectorized block (32 MiB of float64)
_TIE = 1e-12  # relative slack: an exact tie counts as "trusting" the noisy label


@dataclass(frozen=True)
class Advantages:
    """Per-example exact advantages of the Bayes-optimal attacker (see the module docstring)."""

    success_without: FloatArray  # P(optimal guess right | prior only)
    success_with: FloatArray  # P(optimal guess right | prior and the released bin)
    multiplicative: FloatArray  # worst output
    multiplicative_expected: FloatArray  # averaged over the outputs
    trusts: BoolArray
    mse_reduction: FloatArray | None = None  # regression: Var(y) − E Var(y | z)
    prior_variance: FloatArray | None = None

    @property
    def additive(self) -> FloatArray:
        return np.maximum(self.success_with - self.success_without, 0.0)

    def summary(self) -> dict[str, float]:
        """Aggregates for a report: means, quantiles and maxima over the examples."""
        add, mult = self.additive, self.multiplicative
        out = {
            "examples": float(add.size),
            "additive_mean": float(add.mean()),
            "additive_p50": float(np.quantile(add, 0.5)),
            "additive_p90": float(np.quantile(add, 0.9)),
            "additive_p99": float(np.quantile(add, 0.99)),
            "additive_max": float(add.max()),
            "success_without_mean": float(self.success_without.mean()),
            "success_with_mean": float(self.success_with.mean()),
            "multiplicative_max": float(mult.max()),
            "multiplicative_p50": float(np.quantile(mult, 0.5)),
            "multiplicative_expected_mean": float(self.multiplicative_expected.mean()),
            "share_trusting_noisy_label": float(self.trusts.mean()),
        }
        if self.mse_reduction is not None and self.prior_variance is not None:
            out["mse_reduction_mean"] = float(self.mse_reduction.mean())
            variance = float(self.prior_variance.mean())
            out["mse_reduction_share"] = float(self.mse_reduction.mean() / variance) if variance > 0 else 0.0
        return out


def targets_of(published: PublishedMechanism) -> IntArray:
    """The attacker's target of each support point: its bin (RR-on-Bins), its class (RR-Top-k) or the
    point itself (unbiased)."""
    if published.kind == "rr_on_bins":
        return np.asarray(published.support_bins, dtype=np.int64)
    return np.arange(len(published.support), dtype=np.int64)


def target_prior(published: PublishedMechanism, prior: ArrayLike) -> FloatArray:
    """A prior on the support (``k`` or ``n × k``, rows normalized) summed into the targets."""
    p = prior_rows(prior, len(published.support), "prior")
    if published.kind != "rr_on_bins":
        return p  # the targets are the classes (the support points) themselves
    return _per_bin(published, p)


def _per_bin(published: PublishedMechanism, values: FloatArray) -> FloatArray:
    """Column sums over each RR-on-Bins bin (bins are consecutive runs of the support)."""
    bins = np.asarray(published.support_bins, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, np.diff(bins) != 0])
    return np.add.reduceat(values, starts, axis=1)


def advantages(published: PublishedMechanism, prior: ArrayLike) -> Advantages:
    """Exact per-example advantages for an attacker whose belief about each label is ``prior`` (one
    row per example over the support, or one row shared by all; rows are normalized)."""
    p = prior_rows(prior, len(published.support), "prior")
    if published.kind == "unbiased":
        support = np.asarray(published.support, dtype=np.float64)
        return channel_advantages(p, published.transition_matrix(), targets_of(published), support)
    q = target_prior(published, p)
    mse: tuple[FloatArray, FloatArray] | None = None
    if published.kind == "rr_on_bins":
        mse = _mse_reduction(published, p)
    parts = [
        _structured(published, q[start : start + _chunk_rows(published.m)])
        for start in range(0, q.shape[0], _chunk_rows(published.m))
    ]
    without, with_, mult, mult_exp, trusts = (np.concatenate([part[i] for part in parts]) for i in range(5))
    return Advantages(
        without,
        with_,
        mult,
        mult_exp,
        trusts.astype(bool),
        mse[0] if mse else None,
        mse[1] if mse else None,
    )


def _chunk_rows(m: int) -> int:
    return max(1, _CHUNK_CELLS // max(m, 1))


def _structured(
    published: PublishedMechanism, q: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    m = published.m
    t = published.threshold
    h, l_ = t.keep_probability, t.move_probability
    targets_bin = bin_of_target(published)
    reported = targets_bin >= 0
    # r[:, z]: the prior mass of the target bin z reports; u: the largest unreported target's mass
    r = np.zeros((q.shape[0], m))
    r[:, targets_bin[reported]] = q[:, reported]
    unreported = q[:, ~reported]
    u_max = unreported.max(axis=1) if unreported.shape[1] else np.zeros(q.shape[0])
    u_sum = unreported.sum(axis=1) if unreported.shape[1] else np.zeros(q.shape[0])
    without = np.maximum(r.max(axis=1) if m else 0.0, u_max)
    if m == 1:
        zero = np.zeros(q.shape[0])
        trusts_one = (r[:, 0] >= u_max * (1 - _TIE)).astype(np.float64)  # the one bin's target is likeliest
        return without, without.copy(), zero, zero.copy(), trusts_one
    # the best "other" reported target for each output: the top mass unless it is z's own
    order = np.argsort(-r, axis=1)
    top1 = np.take_along_axis(r, order[:, :1], axis=1)
    top2 = np.take_along_axis(r, order[:, 1:2], axis=1)
    other = np.where(np.arange(m)[None, :] == order[:, :1], top2, top1)
    own = h * r
    rival = np.maximum(l_ * other, (u_max / m)[:, None])
    with_ = np.maximum(own, rival).sum(axis=1)
    trusts = np.all(own >= rival * (1 - _TIE), axis=1)
    # multiplicative: P(z | t) takes the values h (z's own target), l (other reported), 1/m (unreported)
    positive = r > 0
    n_pos = positive.sum(axis=1, keepdims=True)
    has_own = positive
    has_other = (n_pos - positive) >= 1
    has_unrep: BoolArray = np.zeros((q.shape[0], 1), dtype=bool)
    if unreported.shape[1]:
        has_unrep = np.asarray((unreported > 0).any(axis=1), dtype=bool).reshape(-1, 1)
    hi = np.where(has_own, h, np.where(has_unrep, 1.0 / m, l_))
    lo = np.where(has_other, l_, np.where(has_unrep, 1.0 / m, h))
    present = has_own.astype(int) + has_other.astype(int) + np.broadcast_to(has_unrep, positive.shape)
    with np.errstate(divide="ignore"):
        shift = np.where(present >= 2, np.log(hi / lo), 0.0)
    p_out = h * r + l_ * (r.sum(axis=1, keepdims=True) - r) + (u_sum / m)[:, None]
    mult = np.where(p_out > 0, shift, 0.0).max(axis=1)
    mult_exp = (p_out * shift).sum(axis=1)
    return without, with_, mult, mult_exp, trusts.astype(np.float64)


def bin_of_target(published: PublishedMechanism) -> IntArray:
    if published.kind == "rr_on_bins":
        return np.arange(published.m, dtype=np.int64)
    return np.asarray(published.support_bins, dtype=np.int64)


def _mse_reduction(published: PublishedMechanism, p: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``Var(y) − E_z Var(y|z) = Σ_z N_z²/P(z) − μ²`` with ``N_z = Σ_i p_i y_i P(z | i)``."""
    y = np.asarray(published.support)
    t = published.threshold
    h, l_ = t.keep_probability, t.move_probability
    mu = p @ y
    variance = np.maximum(p @ (y * y) - mu * mu, 0.0)
    mass, first = _per_bin(published, p), _per_bin(published, p * y)
    p_out = h * mass + l_ * (mass.sum(axis=1, keepdims=True) - mass)
    n_out = h * first + l_ * (first.sum(axis=1, keepdims=True) - first)
    with np.errstate(divide="ignore", invalid="ignore"):
        second = np.where(p_out > 0, n_out * n_out / p_out, 0.0).sum(axis=1)
    return np.clip(second - mu * mu, 0.0, variance), variance


def channel_advantages(
    prior: ArrayLike, channel: ArrayLike, targets: ArrayLike, values: ArrayLike | None = None
) -> Advantages:
    """The same quantities for any finite channel ``P(output o | support point i)`` (``k × O``),
    computed densely: for baselines (e.g. Laplace noise on a fine output grid) and as a cross-check.
    "Trusts" needs outputs that name targets, so it is only computed when ``O`` is the target count."""
    c = np.asarray(channel, dtype=np.float64)
    p = prior_rows(prior, c.shape[0], "prior")
    tg = np.asarray(targets, dtype=np.int64)
    member = np.zeros((c.shape[0], int(tg.max()) + 1))
    member[np.arange(c.shape[0]), tg] = 1.0
    y = None if values is None else np.asarray(values, dtype=np.float64)
    step = max(1, _CHUNK_CELLS // (member.shape[1] * c.shape[1]))
    parts = [_dense(p[i : i + step], c, member, y) for i in range(0, p.shape[0], step)]
    cols = [np.concatenate([part[j] for part in parts]) for j in range(7)]
    has_mse = y is not None
    return Advantages(
        cols[0],
        cols[1],
        cols[2],
        cols[3],
        cols[4].astype(bool),
        cols[5] if has_mse else None,
        cols[6] if has_mse else None,
    )


def _dense(p: FloatArray, c: FloatArray, member: FloatArray, y: FloatArray | None) -> list[FloatArray]:
    n_targets = member.shape[1]
    q = p @ member  # n × T
    inside = member > 0
    joint = np.stack([p[:, inside[:, t]] @ c[inside[:, t]] for t in range(n_targets)], axis=1)  # P(t, o)
    col_max = joint.max(axis=1)
    p_out = joint.sum(axis=1)
    if c.shape[1] == n_targets:
        diag = joint[:, np.arange(n_targets), np.arange(n_targets)]
        trusts = np.all(diag >= col_max * (1 - _TIE), axis=1)
    else:
        trusts = np.zeros(p.shape[0], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        likelihood = joint / q[:, :, None]  # P(o | t) for targets with positive prior
        possible = (q > 0)[:, :, None]
        hi = np.where(possible, likelihood, -np.inf).max(axis=1)
        lo = np.where(possible, likelihood, np.inf).min(axis=1)
        shift = np.where(hi > 0, np.log(hi) - np.log(lo), 0.0)
    shift = np.where(np.isnan(shift), 0.0, shift)
    mult = np.where(p_out > 0, shift, 0.0).max(axis=1)
    mult_exp = np.where(p_out > 0, p_out * shift, 0.0).sum(axis=1)
    reduction = variance = np.zeros(p.shape[0])
    if y is not None:
        mu = p @ y
        variance = np.maximum(p @ (y * y) - mu * mu, 0.0)
        n_out = (p * y) @ c
        with np.errstate(divide="ignore", invalid="ignore"):
            second = np.where(p_out > 0, n_out * n_out / p_out, 0.0).sum(axis=1)
        reduction = np.clip(second - mu * mu, 0.0, variance)
    return [
        q.max(axis=1),
        col_max.sum(axis=1),
        mult,
        mult_exp,
        trusts.astype(np.float64),
        reduction,
        variance,
    ]


def prior_rows(prior: ArrayLike, k: int, name: str) -> FloatArray:
    p = np.asarray(prior, dtype=np.float64)
    if p.ndim == 1:
        p = p[None, :]
    if p.ndim != 2 or p.shape[1] != k:
        raise ParameterError(f"{name} needs {k} masses per row (one per support point)", name)
    if not np.isfinite(p).all() or np.any(p < 0):
        raise ParameterError(f"{name} must be finite and non-negative", name)
    sums = p.sum(axis=1, keepdims=True)
    if np.any(sums <= 0):
        raise ParameterError(f"every row of {name} needs a positive sum", name)
    return p / sums
