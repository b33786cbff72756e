"""Baselines against their exact distributions (KS / chi-square at α = 1e-6) and the DP ratio."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from labeldp.mechanisms import (
    SecureRandom,
    discrete_laplace,
    exponential_mechanism,
    integer_grid,
    laplace,
    rr_over_support,
)
from labeldp.mechanisms.baselines import (
    discrete_staircase_noise,
    discrete_staircase_step,
    staircase_gamma,
    staircase_noise,
)
from tests.support.stats import ALPHA, chi_square_ok

N = 300_000


def ks_against(samples: np.ndarray, cdf: np.ndarray, grid: np.ndarray) -> None:
    ecdf = np.searchsorted(np.sort(samples), grid, side="right") / samples.size
    d = float(np.max(np.abs(ecdf - cdf)))
    assert d <= float(stats.kstwo.ppf(1 - ALPHA, samples.size)), d


def test_laplace_is_clipped_laplace() -> None:
    eps, lo, hi, y = 2.0, 0.0, 10.0, 3.0
    out = laplace(np.full(N, y), lo, hi, eps)
    assert out.min() >= lo and out.max() <= hi
    grid = np.linspace(lo, hi - 1e-9, 400)
    ks_against(out, stats.laplace.cdf(grid, loc=y, scale=(hi - lo) / eps), grid)


def test_discrete_laplace_pmf_with_clipping_atoms() -> None:
    eps, lo, hi, y = 3.0, 0, 12, 4
    out = discrete_laplace(np.full(N, y), lo, hi, eps).astype(int)
    q = math.exp(-eps / (hi - lo))
    z = np.arange(-200, 201)
    pmf = (1 - q) / (1 + q) * q ** np.abs(z)
    cells = np.zeros(hi - lo + 1)
    np.add.at(cells, np.clip(y + z, lo, hi) - lo, pmf)
    ok, ratio = chi_square_ok(np.bincount(out - lo, minlength=cells.size), cells)
    assert ok, ratio


def test_staircase_noise_matches_its_density() -> None:
    eps, delta = 1.0, 2.0
    gamma, b = staircase_gamma(eps), math.exp(-eps)
    noise = staircase_noise(N, delta, eps, SecureRandom())
    # mass of each step [jΔ, (j+γ)Δ) and [(j+γ)Δ, (j+1)Δ) on the positive side, mirrored
    j = np.arange(30)
    inner, outer = gamma * b**j, (1 - gamma) * b ** (j + 1)
    norm = 2 * (inner.sum() + outer.sum())
    edges = np.sort(np.concatenate([j * delta, (j + gamma) * delta]))
    pos = np.histogram(noise[noise >= 0], bins=np.append(edges, np.inf))[0]
    neg = np.histogram(-noise[noise < 0], bins=np.append(edges, np.inf))[0]
    expected = np.ravel(np.column_stack([inner, outer])) / norm
    ok, ratio = chi_square_ok(np.concatenate([pos, neg]), np.concatenate([expected, expected]))
    assert ok, ratio


def discrete_staircase_pmf(z: np.ndarray, delta: int, eps: float) -> np.ndarray:
    r, b = discrete_staircase_step(delta, eps), math.exp(-eps)
    m = np.abs(z)
    return b ** (m // delta) * np.where(m % delta < r, 1.0, b)


def test_discrete_staircase_noise_matches_pmf_and_is_dp() -> None:
    eps, delta = 0.7, 9
    z = np.arange(-400, 401)
    w = discrete_staircase_pmf(z, delta, eps)
    pmf = w / w.sum()
    for shift in range(1, delta + 1):  # neighbouring inputs differ by at most Δ
        assert np.max(pmf[shift:] / pmf[:-shift]) <= math.exp(eps) * (1 + 1e-12)
        assert np.max(pmf[:-shift] / pmf[shift:]) <= math.exp(eps) * (1 + 1e-12)
    noise = discrete_staircase_noise(N, delta, eps, SecureRandom())
    cells = np.arange(-60, 61)
    observed = np.array([np.sum(noise < -60)] + [np.sum(noise == c) for c in cells] + [np.sum(noise > 60)])
    inside = pmf[np.searchsorted(z, cells)]
    tail = (1 - inside.sum()) / 2
    ok, ratio = chi_square_ok(observed, np.concatenate(([tail], inside, [tail])))
    assert ok, ratio


def test_exponential_mechanism_density() -> None:
    eps, lo, hi, y = 1.0, 0.0, 10.0, 2.0
    out = exponential_mechanism(np.full(N, y), lo, hi, eps)
    rate = eps / (2 * (hi - lo))
    grid = np.linspace(lo, hi, 300)
    dens = np.exp(-rate * np.abs(grid - y))
    cdf = np.concatenate(([0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(grid))))
    ks_against(out, cdf / cdf[-1], grid)


def test_integer_exponential_mechanism_pmf() -> None:
    eps, lo, hi, y = 2.0, 0, 20, 15
    out = exponential_mechanism(np.full(N, float(y)), lo, hi, eps, integer=True).astype(int)
    w = np.exp(-eps * np.abs(np.arange(lo, hi + 1) - y) / (2 * (hi - lo)))
    ok, ratio = chi_square_ok(np.bincount(out - lo, minlength=w.size), w)
    assert ok, ratio


def test_rr_over_support_returns_support_values() -> None:
    sup = integer_grid(0, 4)
    out = rr_over_support(np.full(N, 2.0), sup, 1.0)
    e = math.exp(1.0)
    expected = np.full(5, 1 / (e + 4))
    expected[2] = e / (e + 4)
    ok, ratio = chi_square_ok(np.bincount(out.astype(int), minlength=5), expected)
    assert ok, ratio
