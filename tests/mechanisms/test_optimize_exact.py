"""The optimizer returns the exact optimum: checked against an LP over all ε-DP mechanisms and
against the naive O(k³) dynamic program of Algorithm 2."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import optimize_rr_on_bins
from tests.support import oracles

LOSS_NAMES = ("squared", "absolute", "poisson")
REL = 1e-9


def random_prior(rng: np.random.Generator, k: int, loss: str) -> tuple[np.ndarray, np.ndarray]:
    if loss == "poisson":
        y = np.sort(rng.choice(np.arange(0, 60), size=k, replace=False)).astype(float)
    else:
        y = np.sort(rng.normal(0, 10, size=k))
    p = rng.dirichlet(np.full(k, 0.7))
    if k > 2 and rng.random() < 0.3:
        p[rng.integers(k)] = 0.0  # empty cells happen in noisy priors
        p /= p.sum()
    if loss == "poisson" and p @ y == 0:
        p[-1] += 0.1
        p /= p.sum()
    shuffled = rng.permutation(np.column_stack([y, p]))  # any order is accepted
    return shuffled[:, 0], shuffled[:, 1]


def shift(y: np.ndarray, p: np.ndarray, loss: str) -> float:
    """The constant Σ p·min_ŷ ℓ(ŷ, y) that makes a loss non-negative (0 except for Poisson)."""
    if loss != "poisson":
        return 0.0
    pos = y > 0
    return float(np.sum(p[pos] * (y[pos] - y[pos] * np.log(y[pos]))))


def relative_gap(ours: float, reference: float, scale: float) -> float:
    """Relative to the optimum; the floor (a millionth of the loss scale) only matters when the
    optimum is ~0 (k = 1, or a huge ε), where both sides are rounding noise."""
    return abs(ours - reference) / max(abs(reference), 1e-6 * abs(scale), 1e-12)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_matches_lp_over_all_dp_mechanisms(loss: str) -> None:
    rng = np.random.default_rng({"squared": 1, "absolute": 2, "poisson": 3}[loss])
    worst = 0.0
    for _ in range(70):
        k = int(rng.integers(1, 9))
        eps = float(math.exp(rng.uniform(math.log(0.05), math.log(8))))
        y, p = random_prior(rng, k, loss)
        order = np.argsort(y)
        ys, ps = y[order], p[order]
        mech = optimize_rr_on_bins(y, p, eps, loss)
        ours = mech.expected_loss(y, p) - shift(ys, ps, loss)
        outputs = oracles.lp_output_set(ys, ps, eps, loss)
        lp = oracles.lp_optimum(ys, ps, eps, outputs, oracles.LOSSES[loss]) - shift(ys, ps, loss)
        scale = max(
            abs(shift(ys, ps, loss)), float(np.sum(ps * oracles.LOSSES[loss](np.full(k, ps @ ys), ys)))
        )
        gap = relative_gap(ours, lp, scale)
        worst = max(worst, gap)
        assert gap <= REL, f"k={k} eps={eps:.4g} ours={ours!r} lp={lp!r}"
    assert worst <= REL


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("k", [12, 60, 200])
def test_matches_naive_dp(loss: str, k: int) -> None:
    rng = np.random.default_rng(k * 7 + len(loss))
    for eps in (0.05, 0.7, 3.0, 8.0):
        y, p = (
            random_prior(rng, k, loss)
            if loss != "poisson"
            else (np.arange(k, dtype=float), rng.dirichlet(np.ones(k)))
        )
        order = np.argsort(y)
        ys, ps = y[order], p[order]
        naive = oracles.naive_dp(oracles.direct_costs(ys, ps, eps, loss), eps) - shift(ys, ps, loss)
        mech = optimize_rr_on_bins(y, p, eps, loss)
        ours = mech.expected_loss(y, p) - shift(ys, ps, loss)
        assert relative_gap(ours, naive, naive) <= REL, (eps, ours, naive)


def test_custom_convex_loss_matches_naive_dp() -> None:
    """A callable loss (pseudo-Huber) goes through the generic golden-section path."""

    def pseudo_huber(y_hat: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.sqrt(1 + (np.asarray(y_hat) - np.asarray(y)) ** 2) - 1

    rng = np.random.default_rng(11)
    for eps in (0.1, 1.0, 5.0):
        y = np.sort(rng.normal(0, 3, size=9))
        p = rng.dirichlet(np.ones(9))
        naive = oracles.naive_dp(oracles.numeric_costs(y, p, eps, pseudo_huber), eps)
        mech = optimize_rr_on_bins(y, p, eps, pseudo_huber)
        assert relative_gap(mech.expected_loss(y, p), naive, naive) <= 1e-8


def test_bin_values_are_sorted_and_map_is_monotone() -> None:
    rng = np.random.default_rng(5)
    for loss in LOSS_NAMES:
        y, p = random_prior(rng, 40, loss)
        mech = optimize_rr_on_bins(y, p, 2.0, loss)
        assert np.all(np.diff(mech.bin_values) > 0)
        assert np.all(np.diff(mech.support_bins) >= 0)
        assert mech.bin_of(np.sort(y)).tolist() == mech.support_bins.tolist()
