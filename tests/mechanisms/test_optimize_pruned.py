"""The branch-and-bound pass for squared and Poisson loss is exact: both lower bounds are checked
against brute force on every block of random priors (the lemmas of docs/math.md §3.2), every pass
against the O(k²) scan (plain and compiled kernel, rewards inside and outside the monotone bound's
range), the whole optimum against Dinkelbach over full scans at a support the kernel really runs on,
and the empty-cell rule against the optimum over the full support."""

from __future__ import annotations

import math

import numpy as np
import pytest

from labeldp.mechanisms import optimize as opt
from labeldp.mechanisms import pruned_segmentation as pruned
from labeldp.mechanisms.interval_costs import PoissonCosts, SquaredCosts, interval_costs
from labeldp.mechanisms.losses import resolve_loss

LOSSES = ("squared", "poisson")


def noisy_prior(rng: np.random.Generator, k: int, empty: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Distinct non-negative values (Poisson needs them) with Dirichlet masses; ``empty`` of the
    cells without mass, as after clipping Laplace noise."""
    y = np.sort(rng.choice(np.arange(4 * k), size=k, replace=False)).astype(float)
    p = rng.dirichlet(np.full(k, rng.uniform(0.2, 2.0)))
    p[rng.random(k) < empty] = 0.0
    p[rng.integers(k)] += 0.01
    return y, p / p.sum()


def random_epsilon(rng: np.random.Generator) -> float:
    return float(math.exp(rng.uniform(math.log(0.01), math.log(30))))


def costs_for(loss: str, y: np.ndarray, p: np.ndarray, eps: float) -> SquaredCosts | PoissonCosts:
    costs = interval_costs(resolve_loss(loss), y, p, eps)
    assert isinstance(costs, SquaredCosts | PoissonCosts)
    return costs


def first_reward(costs: SquaredCosts | PoissonCosts) -> float:
    return costs.partition_cost(np.array([0])) / math.exp(math.log1p(costs.g))


def scan_best(costs: SquaredCosts | PoissonCosts, reward: float) -> np.ndarray:
    """``best[i]`` of the O(k²) scan, every interval evaluated."""
    best = np.zeros(costs.k + 1)
    for i in range(1, costs.k + 1):
        best[i] = float(np.min(best[:i] + costs.row(i))) - reward
    return best


def objective(costs: SquaredCosts | PoissonCosts, starts: np.ndarray, reward: float) -> float:
    return costs.partition_cost(starts) - reward * starts.size


@pytest.mark.parametrize("loss", LOSSES)
def test_both_bounds_hold_on_every_block(loss: str) -> None:
    """For every right end ``i`` and every block ``[lo, hi]`` of left ends, the kernel's bound is at
    most the least ``best[r] + c(r, i)`` in the block — by brute force over all blocks."""
    rng = np.random.default_rng(31 + len(loss))
    checked = monotone_blocks = 0
    for _ in range(12):
        k = int(rng.integers(2, 28))
        y, p = noisy_prior(rng, k)
        costs = costs_for(loss, y, p, random_epsilon(rng))
        seg = pruned.PrunedSegmenter(costs)
        lam0 = first_reward(costs)
        for reward in (lam0, 0.3 * lam0, 3.0 * lam0):
            best = scan_best(costs, reward)
            monotone = reward <= seg.floor * (1 + 1e-12)
            u = best[:k] - costs.g * seg.RT[:k]
            centred = (costs.S - seg.lin[2] * costs.P)[:k]
            for i in range(1, k + 1):
                f = best[:i] + costs.row(i)
                for lo in range(i):
                    for hi in range(lo, i):
                        bound = pruned._bound(
                            seg.poisson, costs.P, costs.S, seg.A, seg.RT, seg.lin, costs.g, monotone,
                            best, lo, hi, i, float(u[lo : hi + 1].min()),
                            float(centred[lo : hi + 1].min()), float(centred[lo : hi + 1].max()),
                        )  # fmt: skip
                        least = float(f[lo : hi + 1].min())
                        slack = pruned._slack(least, seg.A, seg.lin, costs.g, i)
                        assert bound <= least + slack, (i, lo, hi, reward / lam0)
                        checked += 1
                        monotone_blocks += monotone
    assert checked > 10_000 and monotone_blocks > 0


@pytest.mark.parametrize("loss", LOSSES)
def test_best_is_non_decreasing_for_dinkelbach_rewards(loss: str) -> None:
    """The monotone bound's premise: ``best[r]`` never decreases when the reward is at most the
    cheapest interval's cost, and it can decrease when the reward is larger (so the kernel must
    switch the bound off there, as it does)."""
    rng = np.random.default_rng(37)
    decreased_above = 0
    for _ in range(40):
        y, p = noisy_prior(rng, int(rng.integers(2, 80)))
        costs = costs_for(loss, y, p, random_epsilon(rng))
        lam0 = first_reward(costs)
        for reward in (lam0, 0.5 * lam0, 0.01 * lam0):
            best = scan_best(costs, reward)
            assert np.all(np.diff(best) >= -1e-9 * (1 + np.abs(best[1:])))
        decreased_above += bool(np.any(np.diff(scan_best(costs, 50.0 * lam0)) < 0))
    assert decreased_above > 0


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("loss", LOSSES)
def test_pass_reaches_the_scan_minimum(loss: str, compiled: bool) -> None:
    rng = np.random.default_rng(41 + compiled + 2 * len(loss))
    for _ in range(40 if not compiled else 30):
        k = int(rng.integers(1, 60 if not compiled else 500))
        y, p = noisy_prior(rng, k)
        costs = costs_for(loss, y, p, random_epsilon(rng))
        segment = pruned.PrunedSegmenter(costs)
        lam0 = first_reward(costs)
        for reward in (lam0, 0.5 * lam0, 0.05 * lam0, 2.0 * lam0):
            want = opt._segment(opt._RowCache(costs), reward)
            starts = segment(reward, compiled=compiled)
            assert starts[0] == 0 and np.all(np.diff(starts) > 0) and starts[-1] < k
            assert objective(costs, starts, reward) <= objective(costs, want, reward) + 1e-10 * max(
                1.0, abs(objective(costs, want, reward))
            )


def test_pruning_does_its_job() -> None:
    """On a real-shaped prior the pass evaluates a few hundred intervals per support point (about 190
    here), not the scan's k/2 = 10,000."""
    rng = np.random.default_rng(43)
    k = 20_000
    y = np.arange(k, dtype=float)
    p = np.exp(-(((y - 6_000) / 2_500) ** 2)) + 0.3 * np.exp(-(((y - 14_000) / 1_000) ** 2))
    p = p * rng.uniform(0.5, 1.5, k)
    costs = costs_for("squared", y, p / p.sum(), 1.0)
    segment = pruned.PrunedSegmenter(costs)
    segment(first_reward(costs))
    assert segment.evaluated < 1_000 * k


@pytest.mark.parametrize("eps", [0.05, 2.0, 8.0])
@pytest.mark.parametrize("loss", LOSSES)
def test_optimum_equals_the_scan_optimum_at_a_large_support(loss: str, eps: float) -> None:
    """k = 4,000 with 20 % empty cells: ``optimize`` takes the compiled pruned pass (its own kept
    support is above ``COMPILE_FROM``); Dinkelbach over full scans of the *full* support is the
    reference, so the empty-cell rule is checked too."""
    rng = np.random.default_rng(int(eps * 10) + len(loss))
    y, p = noisy_prior(rng, 4_000, empty=0.2)
    assert np.count_nonzero(p) >= pruned.COMPILE_FROM and pruned.available(int(np.count_nonzero(p)))
    costs = costs_for(loss, y, p, eps)
    e = math.exp(eps)
    starts = np.array([0])
    ratio = costs.partition_cost(starts) / e
    while True:
        candidate = opt._segment(opt._RowCache(costs), ratio)
        if objective(costs, candidate, ratio) - ratio * (e - 1) >= -1e-12 * ratio * e:
            break
        starts, ratio = candidate, costs.partition_cost(candidate) / (e + candidate.size - 1)
    mech = opt.optimize_rr_on_bins(y, p, eps, loss)
    reference = opt._mechanism(
        mech.support, opt._bins_of(starts, y.size), opt._values(costs, starts), eps, resolve_loss(loss)
    )
    assert mech.expected_loss(y, p) == pytest.approx(reference.expected_loss(y, p), rel=1e-11, abs=1e-9)


@pytest.mark.parametrize("loss", LOSSES)
def test_empty_cells_go_to_the_bin_that_serves_them_best(loss: str) -> None:
    rng = np.random.default_rng(47)
    fn = resolve_loss(loss)
    for _ in range(30):
        k = int(rng.integers(3, 200))
        y, p = noisy_prior(rng, k, empty=0.5)
        eps = float(rng.uniform(0.5, 8))
        mech = opt.optimize_rr_on_bins(y, p, eps, loss)
        bins, values = mech.support_bins, mech.bin_values
        assert np.all(np.diff(bins) >= 0) and bins[0] == 0 and bins[-1] == values.size - 1
        for t in np.flatnonzero(p == 0):
            for other in (bins[t] - 1, bins[t] + 1):
                if 0 <= other < values.size:  # no neighbouring bin serves the cell better
                    own, alternative = fn(values[bins[t]], y[t]), fn(values[other], y[t])
                    assert own <= alternative + 1e-9 * abs(alternative)
