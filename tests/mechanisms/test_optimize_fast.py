"""The O(k log k) pass for absolute loss is exact: its premise (Monge step costs over output values)
is checked by brute force, its partitions against the exact O(k²) scan over all intervals, the
compiled kernel against the plain-Python one, and the whole optimum against the scan-based optimum
at a support size the naive DP cannot reach in a test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from labeldp.mechanisms import absolute_segmentation as fast
from labeldp.mechanisms import optimize as opt
from labeldp.mechanisms.interval_costs import AbsoluteCosts, interval_costs
from labeldp.mechanisms.losses import resolve_loss


def noisy_prior(rng: np.random.Generator, k: int, spread: int = 4) -> tuple[np.ndarray, np.ndarray]:
    y = np.sort(rng.choice(np.arange(spread * k), size=k, replace=False)).astype(float)
    p = rng.dirichlet(np.full(k, rng.uniform(0.2, 2.0)))
    p[rng.random(k) < 0.2] = 0.0  # empty cells, as after clipping Laplace noise
    p[rng.integers(k)] += 0.01
    return y, p / p.sum()


def brute_step(y: np.ndarray, p: np.ndarray, g: float, i: int, j: int) -> float:
    """Service cost of the labels strictly between values y_i < y_j, each to the nearer value."""
    between = slice(i + 1, j)
    near = np.minimum(y[between] - y[i], y[j] - y[between])
    return g * float(p[between] @ near)


def quadrangle_violations(cost: np.ndarray) -> int:
    n = cost.shape[0]
    bad = 0
    for a, b, c, d in itertools.combinations_with_replacement(range(n), 4):
        if b < c and not (cost[a, c] + cost[b, d] <= cost[a, d] + cost[b, c] + 1e-9 * (1 + abs(cost[a, d]))):
            bad += 1
    return bad


def test_step_costs_over_values_are_monge_but_interval_costs_are_not() -> None:
    rng = np.random.default_rng(11)
    interval_bad = 0
    for _ in range(12):
        k = 14
        y, p = noisy_prior(rng, k)
        g = math.expm1(float(rng.uniform(0.3, 6)))
        step = np.full((k, k), np.nan)
        for i, j in itertools.combinations(range(k), 2):
            step[i, j] = brute_step(y, p, g, i, j)
        assert quadrangle_violations(step) == 0
        costs = interval_costs(resolve_loss("absolute"), y, p, math.log1p(g))
        table = np.full((k + 1, k + 1), np.nan)
        for i in range(1, k + 1):
            table[:i, i] = costs.row(i)
        interval_bad += quadrangle_violations(table)
    # why interval search would not be exact: the premise fails on the same kind of priors
    assert interval_bad > 0


def scan_objective(costs: AbsoluteCosts, reward: float) -> tuple[float, np.ndarray]:
    starts = opt._segment(opt._RowCache(costs), reward)
    return costs.partition_cost(starts) - reward * starts.size, starts


@pytest.mark.parametrize("compiled", [False, True])
def test_pass_reaches_the_scan_minimum(compiled: bool) -> None:
    rng = np.random.default_rng(12 + compiled)
    for _ in range(60 if not compiled else 25):
        k = int(rng.integers(1, 60 if not compiled else 400))
        y, p = noisy_prior(rng, k)
        eps = float(math.exp(rng.uniform(math.log(0.05), math.log(12))))
        costs = interval_costs(resolve_loss("absolute"), y, p, eps)
        assert isinstance(costs, AbsoluteCosts)
        lam0 = costs.partition_cost(np.array([0])) / math.exp(eps)  # Dinkelbach's first reward
        for reward in (lam0, 0.5 * lam0, 0.05 * lam0):
            want, _ = scan_objective(costs, reward)
            starts = fast.segment_absolute(costs, reward, compiled=compiled)
            assert starts[0] == 0 and np.all(np.diff(starts) > 0) and starts[-1] < k
            got = costs.partition_cost(starts) - reward * starts.size
            assert got <= want + 1e-10 * max(1.0, abs(want))


def test_compiled_and_plain_kernels_agree() -> None:
    rng = np.random.default_rng(13)
    y, p = noisy_prior(rng, 5_000)
    costs = interval_costs(resolve_loss("absolute"), y, p, 3.0)
    assert isinstance(costs, AbsoluteCosts)
    reward = 0.2 * costs.partition_cost(np.array([0])) / math.exp(3.0)
    np.testing.assert_array_equal(
        fast.segment_absolute(costs, reward, compiled=True),
        fast.segment_absolute(costs, reward, compiled=False),
    )


@pytest.mark.parametrize("eps", [0.2, 2.0, 8.0])
def test_optimum_equals_the_scan_optimum_at_a_large_support(eps: float) -> None:
    """k = 3,000 (the naive O(k³) DP would take hours): Dinkelbach over full scans is the reference."""
    rng = np.random.default_rng(int(eps * 10))
    y, p = noisy_prior(rng, 3_000)
    costs = interval_costs(resolve_loss("absolute"), y, p, eps)
    assert isinstance(costs, AbsoluteCosts)
    e = math.exp(eps)
    ratio = costs.partition_cost(np.array([0])) / e
    while True:
        value, candidate = scan_objective(costs, ratio)
        if value - ratio * (e - 1) >= -1e-12 * ratio * e:
            break
        ratio = costs.partition_cost(candidate) / (e + candidate.size - 1)
    mech = opt.optimize_rr_on_bins(y, p, eps, "absolute")
    assert mech.expected_loss(y, p) == pytest.approx(ratio, rel=1e-12)
