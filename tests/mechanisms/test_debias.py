"""Debiasing against its math: exact expectations over the transition matrix, and the affine
correction recovering the true conditional mean on synthetic data within a confidence bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from labeldp.mechanisms import integer_grid, optimize_rr_on_bins
from labeldp.mechanisms.debias import BinsNoise
from tests.support.seeded import SeededRandom
from tests.support.stats import ALPHA


def squared(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (f - y) ** 2


def poisson(f: np.ndarray, y: np.ndarray) -> np.ndarray:
    return f - y * np.log(f)


@pytest.mark.parametrize(("m", "eps"), [(2, 0.3), (3, 1.0), (7, 4.0)])
def test_unbiased_targets_and_losses_have_the_right_expectation_exactly(m: int, eps: float) -> None:
    rng = np.random.default_rng(m)
    noise = BinsNoise.of(np.sort(rng.uniform(1, 50, m)), eps)
    T = noise.transition()
    assert np.allclose(T.sum(axis=1), 1.0)
    assert np.allclose(T, np.where(np.eye(m) == 1, math.exp(eps), 1) / (math.exp(eps) + m - 1))
    targets = noise.unbiased_targets(np.arange(m))
    assert np.allclose(T @ targets, noise.bin_values)  # E[ỹ | Φ(y) = j] = ŷ_j for every j
    f = rng.uniform(1, 50, 5)
    for loss in (squared, poisson):
        per_output = np.stack([noise.unbiased_loss(f, np.full(5, o), loss) for o in range(m)], axis=1)
        expected = per_output @ T.T  # E over the output for each true bin j
        truth = loss(f[:, None], noise.bin_values[None, :])
        assert np.allclose(expected, truth)
    assert np.allclose(noise.affine_correct(T @ noise.bin_values), noise.bin_values)
    # a model's prediction at the noisy extremes: the plain inverse leaves the bins' range (a negative
    # price), the correction clips it to the nearest value E[Φ(y) | x] can take
    lo, hi = noise.bin_values.min(), noise.bin_values.max()
    assert (lo - noise.b * noise.bin_values.sum()) / noise.a < lo and (
        hi - noise.b * noise.bin_values.sum()
    ) / noise.a > hi
    assert np.array_equal(noise.affine_correct(np.array([lo, hi])), [lo, hi])


def test_affine_correction_recovers_the_conditional_mean_on_synthetic_data() -> None:
    """x in 8 cells, y | x ~ Poisson(λ(x)) clipped to 0..30; the corrected cell means of the noisy
    labels must match E[Φ(y) | x] within Bonferroni-corrected normal bounds at α = 1e-6."""
    rng = np.random.default_rng(3)
    cells, per_cell = 8, 40_000
    lam = np.linspace(2, 25, cells)
    x = np.repeat(np.arange(cells), per_cell)
    y = np.minimum(rng.poisson(lam[x]), 30).astype(float)
    support = integer_grid(0, 30)
    mech = optimize_rr_on_bins(support, support.counts(y), 1.5, "squared")
    assert mech.m >= 2
    noise = BinsNoise.of(mech.bin_values, mech.epsilon)
    noisy = mech.values_of(mech.randomize(y, rng=SeededRandom(5)))
    binned = mech.values_of(mech.bin_of(y))
    z = stats.norm.ppf(1 - ALPHA / (2 * cells))
    for c in range(cells):
        sel = x == c
        corrected = noise.affine_correct(np.array([noisy[sel].mean()]))[0]
        truth = binned[sel].mean()
        se = noisy[sel].std(ddof=1) / math.sqrt(sel.sum()) / noise.a
        assert abs(corrected - truth) <= z * se, (c, corrected, truth, se)
        naive_gap = abs(noisy[sel].mean() - truth)
        if c in (0, cells - 1):
            assert naive_gap > z * se  # without the correction the extremes are visibly biased


def test_bad_noise_models_are_refused() -> None:
    with pytest.raises(ValueError, match="bin_values"):
        BinsNoise.of([], 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        BinsNoise.of([1.0, 2.0], 0.0)


def test_rr_top_k_corrections_account_for_the_unreported_classes() -> None:
    """Classes outside RR-Top-k's reported set land in a uniform bin: the class probabilities and the
    0-1 error estimate use the prior's unreported mass π, and are unbiased with it (checked against
    the truth within 5 standard errors, where ignoring π would be off by far more)."""
    from labeldp.mechanisms import optimize_rr_top_k

    prior = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    mech = optimize_rr_top_k(prior, 1.0)
    assert 1 < mech.k < prior.size
    published = mech.describe(prior=prior, epsilon_prior=0.1)
    noise = BinsNoise.of_published(published)
    pi = float(prior[[c for c in range(6) if c not in mech.top]].sum())
    assert noise.outside_mass == pytest.approx(pi) and pi >= 0.25
    n = 400_000
    labels = np.repeat(np.arange(6), (prior * n).astype(int))
    bins = mech.randomize(labels, rng=SeededRandom(9))
    observed = np.bincount(bins, minlength=mech.k) / bins.size
    estimated = noise.class_probabilities(observed[None, :])[0]
    truth = prior[mech.top]
    se = np.sqrt(observed * (1 - observed) / bins.size) / noise.a
    assert np.all(np.abs(estimated - truth) <= 5 * se + 1e-9), (estimated, truth)
    naive = np.clip((observed - noise.b) / noise.a, 0, None)
    assert np.max(np.abs(naive / naive.sum() - truth)) > 10 * se.max()  # ignoring π is visibly wrong
    predicted = np.zeros(bins.size, dtype=np.int64)  # always the most likely reported class
    actual = float(np.mean(labels != mech.top[0]))
    estimate = noise.zero_one_error(predicted, bins)
    assert abs(estimate - actual) < 5 * np.sqrt(actual * (1 - actual) / bins.size) / noise.a
    assert abs(estimate - pi / mech.k - actual) > 0.05  # the uncorrected estimate is biased by π/k
