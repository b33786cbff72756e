"""The private prior: exact discrete Laplace noise, clipping, normalization and the default split."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from labeldp.mechanisms import (
    SecureRandom,
    default_prior_epsilon,
    integer_grid,
    noisy_counts,
    private_prior,
)
from labeldp.mechanisms.exact_laplace import bernoulli_exp_neg, sample_discrete_laplace
from tests.support.stats import ALPHA, chi_square_ok, wilson


def discrete_laplace_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    q = math.exp(-1 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(z)


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_prior_noise_is_discrete_laplace_with_scale_two_over_epsilon(eps: float) -> None:
    """KS test of the noise (labels all in one cell, so noise = counts − n) against the exact CDF."""
    sup = integer_grid(0, 19_999)
    counts = noisy_counts(np.zeros(50), sup, eps)
    noise = counts - np.bincount(np.zeros(50, dtype=np.int64), minlength=sup.k)
    scale = 2 / eps
    support = np.arange(-int(60 * scale) - 5, int(60 * scale) + 6)
    cdf_values = np.cumsum(discrete_laplace_pmf(support, scale))
    ecdf = np.searchsorted(np.sort(noise), support, side="right") / noise.size
    d = float(np.max(np.abs(ecdf - cdf_values)))
    critical = float(stats.kstwo.ppf(1 - ALPHA, noise.size))  # conservative for discrete laws
    assert d <= critical, (d, critical)
    # and the variance is the discrete Laplace's 2q/(1-q)^2, not something merely similar
    q = math.exp(-1 / scale)
    assert abs(noise.var() / (2 * q / (1 - q) ** 2) - 1) < 0.1


def test_discrete_laplace_pmf_by_chi_square() -> None:
    scale = Fraction(5, 2)
    z = sample_discrete_laplace(scale, 60_000, SecureRandom())
    cells = np.arange(-15, 16)
    observed = np.array([np.sum(z < -15)] + [np.sum(z == c) for c in cells] + [np.sum(z > 15)])
    pmf = discrete_laplace_pmf(cells, float(scale))
    tail = (1 - pmf.sum()) / 2
    ok, ratio = chi_square_ok(observed, np.concatenate(([tail], pmf, [tail])))
    assert ok, ratio


def test_bernoulli_exp_is_exact_in_distribution() -> None:
    rng = SecureRandom()
    assert all(bernoulli_exp_neg(Fraction(0), rng) for _ in range(1000))
    for gamma in (Fraction(1, 3), Fraction(1), Fraction(7, 3)):
        n = 40_000
        hits = sum(bernoulli_exp_neg(gamma, rng) for _ in range(n))
        lo, hi = wilson(np.array(hits), np.array(n))
        assert lo <= math.exp(-float(gamma)) <= hi


def test_private_prior_is_a_distribution_close_to_the_histogram() -> None:
    sup = integer_grid(0, 52)
    labels = np.repeat(np.arange(53.0), np.arange(1, 54) * 40)
    prior = private_prior(labels, sup, 1.0)
    assert prior.shape == (53,) and np.all(prior >= 0) and math.isclose(prior.sum(), 1.0)
    true = sup.counts(labels) / labels.size
    assert np.abs(prior - true).sum() < 0.05


def test_private_prior_is_uniform_when_every_noisy_count_is_negative() -> None:
    sup = integer_grid(0, 2)
    rng = SecureRandom()
    for _ in range(200):
        prior = private_prior(np.array([], dtype=float), sup, 50.0, rng=rng)  # noise ~0: all cells 0
        assert np.allclose(prior, 1 / 3)


def test_default_split_follows_theorem_7_shape() -> None:
    shares = [default_prior_epsilon(1.0, n, 53) / 1.0 for n in (100, 10_000, 1_000_000, 10**9)]
    assert all(a > b for a, b in itertools.pairwise(shares))  # shrinks as n grows
    assert shares[0] == 0.5 and shares[-1] > 0  # capped at half the budget
    assert default_prior_epsilon(1.0, 10_000, 100) == pytest.approx(0.1)
    assert default_prior_epsilon(0.1, 10_000, 100) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="n and k"):
        default_prior_epsilon(1.0, 0, 53)
