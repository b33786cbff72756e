"""The loss-optimal RR-on-Bins for a prior (Algorithm 2), computed exactly and fast.

Algorithm 2 minimizes ``A[k][m] / (e^ε + m − 1)`` over the number of bins ``m`` and the interval
partition, where ``A[k][m]`` is the least total interval cost with exactly ``m`` intervals. Instead of
filling the whole ``k × m`` table (``O(k³)``), we solve the ratio with Dinkelbach's method: for a
trial value ``λ`` the problem ``min_P  N(P) − λ·(e^ε + m(P) − 1)`` is an unconstrained segmentation
with a per-bin reward ``λ`` (one ``O(k²)`` pass, vectorized over the left end of the interval), and
updating ``λ ← N(P)/D(P)`` decreases strictly until the optimum, which it reaches exactly after
finitely many passes (typically 3–6). The result is the optimum of Algorithm 2, and by Theorem 5 the
optimum over all ε-label-DP mechanisms; the test suite checks both against a linear program and
against the naive DP.

For absolute loss a pass is ``O(k log k)`` instead (``absolute_segmentation``: the bins' values are
support points, and over values the problem is a facility location with Monge costs). Squared and
Poisson interval costs violate the quadrangle inequality, so no monotone-matrix search is exact for
them; their pass is a branch and bound over the left ends with two provable lower bounds
(``pruned_segmentation``), which prunes all but a few hundred intervals per support point on real
priors, and the exact ``O(k²)`` scan below ``COMPILE_FROM`` points or without numba. Cells without
prior mass are set aside before any pass (``_without_empty_cells``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from labeldp.mechanisms import pruned_segmentation
from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.absolute_segmentation import segment_absolute
from labeldp.mechanisms.interval_costs import (
    AbsoluteCosts,
    IntervalCosts,
    PoissonCosts,
    SquaredCosts,
    interval_costs,
)
from labeldp.mechanisms.losses import Loss, LossFn, check_labels_for_loss, resolve_loss
from labeldp.mechanisms.mechanism import checked_objective_epsilon
from labeldp.mechanisms.rr_on_bins import RROnBins
from labeldp.mechanisms.support import Support
from labeldp.mechanisms.validation import ParameterError, check_epsilon, finite_vector

_MAX_PASSES = 200
_REL_TOL = 1e-12
# Interval costs do not depend on λ: later Dinkelbach passes reuse the first pass's rows when all
# k(k+1)/2 of them fit in this budget (k <= ~11,500); beyond it they are recomputed per pass.
ROW_CACHE_BYTES = 512 * 2**20


class _RowCache:
    """Rows ``c(·, i)`` packed into one triangular buffer (row ``i`` at offset ``i(i−1)/2``): a single
    allocation, so the cache costs exactly ``8·k(k+1)/2`` bytes without heap fragmentation."""

    def __init__(self, costs: IntervalCosts, budget_bytes: int = ROW_CACHE_BYTES) -> None:
        self.k = costs.k
        self._costs = costs
        size = self.k * (self.k + 1) // 2
        self._buffer: FloatArray | None = np.empty(size) if 8 * size <= budget_bytes else None
        self._filled = np.zeros(self.k + 1, dtype=bool)

    def row(self, i: int) -> FloatArray:
        if self._buffer is None:
            return self._costs.row(i)
        view = self._buffer[i * (i - 1) // 2 : i * (i + 1) // 2]
        if not self._filled[i]:
            view[:] = self._costs.row(i)
            self._filled[i] = True
        return view


def optimize_rr_on_bins(
    values: Support | ArrayLike,
    probs: ArrayLike,
    epsilon: float,
    loss: str | LossFn | Loss = "squared",
    *,
    optimize_at: float | None = None,
) -> RROnBins:
    """The RR-on-Bins mechanism with the least expected ``loss`` under the prior ``probs``.

    ``values`` is the public support (any order, distinct) or a ``Support``; ``probs`` are the prior
    masses (non-negative, normalized here). ``loss`` is ``"squared"``, ``"absolute"``, ``"poisson"``
    or a convex callable ``loss(y_hat, y)`` that broadcasts over arrays (slower: for small supports).
    ``optimize_at``: the bins and values that are optimal at this ε (>= ``epsilon``; the model
    objective, ``labeldp.mechanisms.objective``), randomizing at ``epsilon``.
    """
    eps = check_epsilon(epsilon)
    at = checked_objective_epsilon(optimize_at, eps)
    loss_spec = resolve_loss(loss)
    if loss_spec.name == "zero_one":
        raise ParameterError("the zero_one loss is served by RR-Top-k (optimize_rr_top_k)", "loss")
    support, p = _support_and_prior(values, probs)
    check_labels_for_loss(support.values, loss_spec, "values")
    best = _without_empty_cells(support, p, eps if at is None else at, loss_spec)
    if at is None:
        return best
    return RROnBins(eps, support, best.support_bins, best.bin_values, loss_spec, at)


def _without_empty_cells(support: Support, p: FloatArray, eps: float, loss: Loss) -> RROnBins:
    """Optimize over the cells with prior mass, then give each empty cell to the nearer (in ``loss``)
    of its neighbours' bins.

    Empty cells change no interval's cost, so they cannot change the optimum; left in, they make the
    pruned pass's objective flat over every empty run. Where they go matters only for labels that
    land there although the (noisy) prior gave them no mass: to the bin whose value serves them best
    (for absolute loss, the nearest value, as its pass's Voronoi cells always did).
    """
    kept = np.flatnonzero(p > 0)
    costs = interval_costs(loss, support.values[kept], p[kept], eps)
    starts = _best_partition(costs, math.exp(eps))
    values = _values(costs, starts)
    kept_bins = _bins_of(starts, kept.size)
    y, cells = support.values, np.arange(support.k)
    # each cell's nearest kept cells: below (or the first) and above (or the last)
    above = np.minimum(np.searchsorted(kept, cells), kept.size - 1)
    below = np.maximum(above - (kept[above] > cells), 0)
    low, high = kept_bins[below], kept_bins[above]
    prefer_high = loss(values[high], y) < loss(values[low], y)  # ties to the lower bin
    return _mechanism(support, np.where(prefer_high, high, low), values, eps, loss)


def _support_and_prior(values: Support | ArrayLike, probs: ArrayLike) -> tuple[Support, FloatArray]:
    p = finite_vector(probs, "probs")
    if isinstance(values, Support):
        support = values
        if p.size != support.k:
            raise ParameterError(f"values and probs must have the same length ({support.k} != {p.size})")
    else:
        y = finite_vector(values, "values")
        if y.size != p.size:
            raise ParameterError(f"values and probs must have the same length ({y.size} != {p.size})")
        order = np.argsort(y, kind="stable")
        y, p = y[order], p[order]
        if np.any(np.diff(y) == 0):
            raise ParameterError("values must be distinct (duplicate support values)")
        support = Support(y)
    if np.any(p < 0):
        raise ParameterError("probs must be non-negative")
    total = float(p.sum())
    if not total > 0:
        raise ParameterError("probs must have a positive sum")
    return support, p / total


def _segment(costs: _RowCache, reward: float) -> IntArray:
    """Bin starts of a partition minimizing ``Σ_{bins} (c(bin) − reward)``, scanning every interval."""
    k = costs.k
    best = np.empty(k + 1)
    best[0] = 0.0
    arg = np.empty(k + 1, dtype=np.int64)
    for i in range(1, k + 1):
        total = best[:i] + costs.row(i)
        r = int(np.argmin(total))
        best[i] = total[r] - reward
        arg[i] = r
    return pruned_segmentation.bin_starts(arg)


def _pass_for(interval: IntervalCosts) -> Callable[[float], IntArray]:
    """The fastest exact pass for these costs (module docstring)."""
    if isinstance(interval, AbsoluteCosts):
        return partial(segment_absolute, interval)
    if isinstance(interval, SquaredCosts | PoissonCosts) and pruned_segmentation.available(interval.k):
        return pruned_segmentation.PrunedSegmenter(interval)
    return partial(_segment, _RowCache(interval))


def _best_partition(interval: IntervalCosts, e_eps: float) -> IntArray:
    return dinkelbach(interval, e_eps, _pass_for(interval))


def dinkelbach(interval: IntervalCosts, e_eps: float, segment: Callable[[float], IntArray]) -> IntArray:
    """Dinkelbach iteration on ``N(P) / (e^ε + m(P) − 1)`` starting from the single bin; ``segment``
    is one pass (bin starts minimizing ``Σ_bins (c(bin) − reward)``)."""
    starts = np.array([0], dtype=np.int64)
    ratio = interval.partition_cost(starts) / e_eps
    for _ in range(_MAX_PASSES):
        candidate = segment(ratio)
        cand_numerator = interval.partition_cost(candidate)
        # N(P) − ratio·D(P) for the pass's partition P: the pass's minimum, so >= 0 means optimal
        gap = cand_numerator - ratio * (e_eps + candidate.size - 1)
        if gap >= -_REL_TOL * max(abs(ratio) * e_eps, 1e-300):
            return starts
        cand_ratio = cand_numerator / (e_eps + candidate.size - 1)
        if cand_ratio >= ratio - _REL_TOL * abs(ratio):
            # no progress beyond rounding: keep the simpler partition (ties would otherwise add
            # bins with equal values, e.g. at tiny ε)
            return starts
        starts, ratio = candidate, cand_ratio
    return starts  # pragma: no cover - Dinkelbach converges in a handful of passes


def _bins_of(starts: IntArray, k: int) -> IntArray:
    return np.repeat(np.arange(starts.size), np.diff(np.append(starts, k)))


def _values(costs: IntervalCosts, starts: IntArray) -> FloatArray:
    ends = np.append(starts[1:], costs.k)
    return np.array([costs.value(int(a), int(b)) for a, b in zip(starts, ends, strict=True)])


def _mechanism(support: Support, bins: IntArray, values: FloatArray, eps: float, loss: Loss) -> RROnBins:
    if np.any(np.diff(values) < 0):
        # Only ties between equally good partitions can produce out-of-order values; any
        # relabelling of the outputs is still RR-on-Bins, so merge order by value.
        order = np.argsort(values, kind="stable")
        values = values[order]
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        bins = rank[bins]
        if np.any(np.diff(bins) < 0):
            raise ArithmeticError("optimal bins are not monotone; please report this prior")
    return RROnBins(eps, support, bins, values, loss)
