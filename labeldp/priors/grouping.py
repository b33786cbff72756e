"""Grouping predicted label distributions into at most G groups, each with a prior on the support.

The rule is public and reads only predictions (functions of features and of earlier DP outputs):

* **values** (regression): each example's predicted label is a normal distribution around the model's
  prediction ``μ`` with the model's held-out spread ``σ``; examples are grouped by quantiles of ``μ``
  (at most G groups of nearly equal size; equal predictions share a group), and a group's prior is the
  sum of its members' distributions, each discretized onto the support's cells. The sum is computed
  from a histogram of the members' predictions on the support (each snapped to its nearest point,
  within half a grid step) times one k × k cell matrix: O(n + G·k²), not O(n·k). On two points a
  prediction's mean *is* its distribution: ``P(hi) = (μ − a)/(b − a)`` with ``a``, ``b`` what the
  model predicts for a label at ``lo`` and at ``hi`` (a model debiased from RR-on-Bins predicts the
  values of the labels' bins, not the labels: ``scale``), kept within ``[TWO_POINT_FLOOR, 1 −
  TWO_POINT_FLOOR]`` — a group sure of its label would merge both points into one bin, and its rows
  would carry no label at all; the examples are then priced as classes with those probabilities, and
  the spread plays no part.
* **classes**: each example's predicted class probabilities; binary examples are grouped by quantiles
  of the positive class's probability, more classes by their most likely class and, within it,
  quantiles of that probability; a group's prior is the mean of its members' probability vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from labeldp.mechanisms import MAX_GROUP_CELLS, MAX_GROUPS, NO_GROUP, ParameterError, Support

_MIN_MASS = 1e-12  # every support point keeps this much of a group's mass (relative to its largest)
# on two points, no prediction is taken as surer than this (docs/math.md §14: on Adult a floor of 0 let
# a fifth of the examples into a group of prior (1, 0), and the final model predicted 0 everywhere;
# one run at ε = 1: floors of 0.05 and 0.1 erred 13.9% and 13.8%, a floor of 0.01 14.7%)
TWO_POINT_FLOOR = 0.05


@dataclass(frozen=True)
class Priced:
    """Each example's group (``NO_GROUP``: not priced) and each group's prior on the support (rows
    sum to 1)."""

    groups: npt.NDArray[np.int64]
    priors: npt.NDArray[np.float64]  # G × k

    @property
    def count(self) -> int:
        return int(self.priors.shape[0])


def _check_groups(max_groups: int, k: int) -> None:
    if not 1 <= max_groups <= MAX_GROUPS:
        raise ParameterError(f"max_groups must lie in [1, {MAX_GROUPS}]", "max_groups")
    if max_groups * k > MAX_GROUP_CELLS:
        raise ParameterError(
            f"max_groups × support size must be at most {MAX_GROUP_CELLS} (here {max_groups} × {k})",
            "max_groups",
        )


def quantile_groups(score: npt.NDArray[np.float64], max_groups: int) -> npt.NDArray[np.int64]:
    """Groups 0..G'−1 (G' ≤ ``max_groups``) of nearly equal size by rank of ``score``; equal scores
    share a group, and groups are numbered in increasing score."""
    n = score.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    # one sort: in score order, a score's rank is where its run of equal scores starts (ties share the
    # least rank), its group rank·G // n renumbered densely, scattered back (a search of every score
    # in the sorted ones and a second sort for the renumbering took 5 of 10M examples' 6 s)
    order = np.argsort(score)
    ordered = score[order]
    starts = np.empty(n, dtype=bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    ranks = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    bucket = ranks * max_groups // n
    dense = np.zeros(n, dtype=np.int64)
    np.cumsum(bucket[1:] != bucket[:-1], out=dense[1:])
    groups = np.empty(n, dtype=np.int64)
    groups[order] = dense
    return groups


def _cell_matrix(values: npt.NDArray[np.float64], sigma: float) -> npt.NDArray[np.float64]:
    """``C[j, s]``: the mass a normal distribution around support point j with spread σ puts on the
    cell of support point s (cells split at midpoints, the outer ones open)."""
    cuts = (values[1:] + values[:-1]) / 2
    upper = np.concatenate([cuts, [np.inf]])
    lower = np.concatenate([[-np.inf], cuts])
    z_hi = (upper[None, :] - values[:, None]) / sigma
    z_lo = (lower[None, :] - values[:, None]) / sigma
    from scipy.special import ndtr  # here: at the top it slows every service start

    return np.asarray(ndtr(z_hi) - ndtr(z_lo), dtype=np.float64)


def _normalized(priors: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    floor = priors.max(axis=1, keepdims=True) * _MIN_MASS
    out = np.maximum(priors, floor)
    return np.asarray(out / out.sum(axis=1, keepdims=True), dtype=np.float64)


def price_values(
    predicted: npt.ArrayLike,
    spread: float,
    support: Support,
    max_groups: int,
    *,
    scale: tuple[float, float] | None = None,
) -> Priced:
    """Regression: predictions ``μ`` (NaN: not priced) with one held-out spread ``σ`` (module doc);
    ``scale``: on two points, what the model predicts for a label at each (default: the points)."""
    mu = np.asarray(predicted, dtype=np.float64)
    values = support.values
    _check_groups(max_groups, values.size)
    if not (np.isfinite(spread) and spread > 0):
        raise ParameterError("the spread must be finite and > 0", "spread")
    if values.size == 2:  # the mean is the distribution (module doc)
        a, b = scale if scale is not None else (float(values[0]), float(values[1]))
        upper = (mu - a) / (b - a) if b > a else np.where(np.isfinite(mu), 0.5, np.nan)
        upper = np.clip(upper, TWO_POINT_FLOOR, 1.0 - TWO_POINT_FLOOR)
        return price_classes(np.column_stack([1.0 - upper, upper]), max_groups)
    priced = np.isfinite(mu)
    groups = np.full(mu.size, NO_GROUP, dtype=np.int64)
    if not priced.any():
        return Priced(groups, np.zeros((0, values.size)))
    mine = quantile_groups(mu[priced], max_groups)
    groups[priced] = mine
    count = int(mine.max()) + 1
    nearest = support.snap(np.clip(mu[priced], values[0], values[-1]))
    histogram = np.bincount(mine * values.size + nearest, minlength=count * values.size)
    histogram = histogram.reshape(count, values.size).astype(np.float64)
    # σ below the grid step would put everything on one point: keep at least half a step of spread
    step = float(np.min(np.diff(values))) if values.size > 1 else 1.0
    cells = _cell_matrix(values, max(spread, step / 2))
    return Priced(groups, _normalized(histogram @ cells))


def price_classes(probabilities: npt.ArrayLike, max_groups: int) -> Priced:
    """Classes: each row a probability vector over the classes 0..C−1 (a row of NaN: not priced)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ParameterError("class probabilities need one row per example and ≥ 2 columns", "probabilities")
    _check_groups(max_groups, p.shape[1])
    priced = np.isfinite(p).all(axis=1)
    groups = np.full(p.shape[0], NO_GROUP, dtype=np.int64)
    if not priced.any():
        return Priced(groups, np.zeros((0, p.shape[1])))
    rows = np.clip(p[priced], 0.0, None)
    rows = rows / np.maximum(rows.sum(axis=1, keepdims=True), 1e-300)
    if rows.shape[1] == 2:
        mine = quantile_groups(rows[:, 1], max_groups)
    else:  # the most likely class, then quantiles of its probability within it
        top = rows.argmax(axis=1)
        per_class = max(1, max_groups // rows.shape[1])
        within = np.zeros(top.size, dtype=np.int64)
        for c in np.unique(top):
            at = top == c
            within[at] = quantile_groups(rows[at, c], per_class)
        _, mine = np.unique(top * per_class + within, return_inverse=True)
    groups[priced] = mine
    count = int(mine.max()) + 1
    sums = np.zeros((count, rows.shape[1]))
    np.add.at(sums, mine, rows)
    return Priced(groups, _normalized(sums))


def check_group_priors(priors: npt.ArrayLike, k: int, max_groups: int) -> npt.NDArray[np.float64]:
    """Group priors as they arrive from the other party: a ``G × k`` array with ``1 ≤ G ≤ max_groups``,
    every mass finite, ≥ 0 and ≤ 1e300, a positive sum per group; returned normalized per group (a
    ``ParameterError`` naming what is wrong otherwise)."""
    arr = np.asarray(priors, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != k:
        raise ParameterError(f"group priors need {k} masses each (the dataset's support)", "priors")
    if not 1 <= arr.shape[0] <= max_groups:
        raise ParameterError(f"there must be between 1 and {max_groups} groups, got {arr.shape[0]}", "priors")
    if not np.isfinite(arr).all() or np.any(arr < 0) or np.any(arr > 1e300):
        raise ParameterError("every group prior's masses must be finite, ≥ 0 and ≤ 1e300", "priors")
    top = arr.max(axis=1, keepdims=True)
    if np.any(top <= 0):
        raise ParameterError("every group prior needs a positive mass", "priors")
    scaled = arr / top  # the largest mass 1: the sum cannot overflow
    return np.asarray(scaled / scaled.sum(axis=1, keepdims=True), dtype=np.float64)
