"""One Dinkelbach pass for absolute loss in O(k log k): 1-D facility location with Monge costs.

The interval costs ``c(r, i)`` do not satisfy the quadrangle inequality (the global term pulls every
bin's value towards the prior's median; ``tests/mechanisms/test_optimize_fast.py`` keeps a counterexample), so
monotone-matrix search over *intervals* is not exact. Over the bins' *output values* it is:

For absolute loss every bin's optimal value is a weighted median, hence a support point, and for a
fixed set ``V`` of values the best assignment of labels is to the nearest value (Voronoi cells, which
are intervals). So

    min_P Σ_bins (c(bin) − λ)  =  min_{V ⊆ support}  Σ_{v∈V} (f₀(v) − λ)  +  g Σ_t p_t min_{v∈V} |v − y_t|

with ``f₀(v) = Σ_t p_t |v − y_t|`` and ``g = e^ε − 1`` (a value whose cell is empty adds
``f₀(v) − λ >= 0``, since Dinkelbach's ``λ`` never exceeds ``min f₀``, the loss of a constant output).
Taking the values in increasing order, the right side is a shortest path in which the step from value
``y_i`` to the next value ``y_j`` costs ``w(i, j) = f₀(y_j) − λ + g·(labels strictly between them, each
served by the nearer of the two)``. ``w`` is Monge — ``w(a,c) + w(b,d) <= w(a,d) + w(b,c)`` for
``a <= b <= c <= d`` — because a label between ``b`` and ``c`` is served at least as well by the inner
pair as by the outer one, and labels outside are served identically. Hence once a later value ``j``
beats an earlier one as predecessor of some ``x``, it beats it for every later ``x``: the candidates
form a queue whose dominance ranges are found by binary search (Galil and Park's least-weight
subsequence algorithm), ``O(k log k)`` cost evaluations per pass, each ``O(log k)``.

The kernel is plain Python over indexable sequences; with the optional ``numba`` (extra ``fast``) the
same function is compiled (~1 s, once per process): the optimum at k = 100,000 then takes 0.1–0.4 s
instead of ~17 s.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence, Sequence
from functools import cache
from types import FunctionType
from typing import Any

import numpy as np

from labeldp.mechanisms._types import FloatArray, IntArray
from labeldp.mechanisms.interval_costs import AbsoluteCosts

# below this support size the plain-Python kernel finishes before numba would have compiled it
COMPILE_FROM = 3_000


def _step_cost(
    y: Sequence[float], P: Sequence[float], S: Sequence[float], f0: Sequence[float], g: float, i: int, j: int
) -> float:
    """``w(i, j) + λ``: open value ``y_j`` after ``y_i``; labels strictly between go to the nearer."""
    mid = 0.5 * (y[i] + y[j])
    lo, hi = i + 1, j  # first index in (i, j] whose label lies above the midpoint
    while lo < hi:
        m = (lo + hi) // 2
        if y[m] > mid:
            hi = m
        else:
            lo = m + 1
    left = (S[lo] - S[i + 1]) - y[i] * (P[lo] - P[i + 1])
    right = y[j] * (P[j] - P[lo]) - (S[j] - S[lo])
    return g * (left + right) + f0[j]


def _least_weight_path(
    y: Sequence[float],
    P: Sequence[float],
    S: Sequence[float],
    f0: Sequence[float],
    g: float,
    lam: float,
    best: MutableSequence[float],
    previous: MutableSequence[int],
    queue: MutableSequence[int],
    starts: MutableSequence[int],
) -> None:
    """Fill ``best[j]`` (least cost with ``y_j`` the largest value so far) and ``previous[j]`` (the
    value before it, ``-1`` for none). ``queue``/``starts`` are scratch space of length ``k``: the
    candidates still able to win, and the first index each one wins from."""
    k = len(y)
    head = 0
    tail = 0
    for j in range(k):
        value = g * (y[j] * P[j] - S[j]) + f0[j] - lam  # y_j is the lowest value
        prev = -1
        while tail - head >= 2 and starts[head + 1] <= j:
            head += 1
        if tail > head:
            i = queue[head]
            via = best[i] + _step_cost(y, P, S, f0, g, i, j) - lam
            if via < value:
                value = via
                prev = i
        best[j] = value
        previous[j] = prev
        if j + 1 >= k:
            break
        pushed = False
        while tail > head:
            b = queue[tail - 1]
            x = max(starts[tail - 1], j + 1)
            if best[j] + _step_cost(y, P, S, f0, g, j, x) <= best[b] + _step_cost(y, P, S, f0, g, b, x):
                tail -= 1  # j wins from b's first index on, hence everywhere b would
                continue
            lo, hi = x + 1, k  # first index where j beats b (k: never)
            while lo < hi:
                m = (lo + hi) // 2
                if best[j] + _step_cost(y, P, S, f0, g, j, m) <= best[b] + _step_cost(y, P, S, f0, g, b, m):
                    hi = m
                else:
                    lo = m + 1
            if lo < k:
                queue[tail] = j
                starts[tail] = lo
                tail += 1
            pushed = True
            break
        if not pushed:
            queue[tail] = j
            starts[tail] = j + 1
            tail += 1


@cache
def _compile() -> Callable[..., None] | None:
    """The kernel compiled by numba (once per process), or None without numba."""
    try:
        import numba
    except ImportError:
        return None
    step = numba.njit(nogil=True)(_step_cost)
    # the same code object, resolving _step_cost to its compiled twin
    path = FunctionType(_least_weight_path.__code__, dict(_least_weight_path.__globals__, _step_cost=step))
    compiled: Callable[..., None] = numba.njit(nogil=True)(path)
    return compiled


def segment_absolute(costs: AbsoluteCosts, reward: float, *, compiled: bool | None = None) -> IntArray:
    """Bin starts of a partition minimizing ``Σ_bins (c(bin) − reward)``: the Voronoi cells of the
    optimal values. ``compiled`` forces (True) or forbids (False) the numba kernel; by default it is
    used when installed and ``k`` is large enough to repay compiling."""
    y = costs.yc  # centred: f₀ and the step costs are shift-invariant, and the sums better scaled
    k, P, S, g = costs.k, costs.P, costs.S, costs.g
    j = np.arange(k)
    f0 = y * P[j] - S[j] + (S[k] - S[j + 1]) - y * (P[k] - P[j + 1])
    kernel = None if compiled is False or (compiled is None and k < COMPILE_FROM) else _compile()
    if compiled and kernel is None:
        raise RuntimeError("numba is not installed (pip install 'labeldp[fast]')")
    best: Any
    previous: Any
    if kernel is not None:
        best, previous = np.empty(k), np.empty(k, dtype=np.int64)
        scratch = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
        kernel(y, P, S, f0, g, float(reward), best, previous, *scratch)
    else:  # lists: plain Python indexes them several times faster than numpy arrays
        best, previous = [0.0] * k, [0] * k
        arrays = (y.tolist(), P.tolist(), S.tolist(), f0.tolist())
        _least_weight_path(*arrays, g, float(reward), best, previous, [0] * k, [0] * k)
    above = g * ((S[k] - S[1:]) - y * (P[k] - P[1:]))  # labels above the highest value
    last = int(np.argmin(np.asarray(best) + above))
    values = [last]
    while previous[values[-1]] >= 0:
        values.append(int(previous[values[-1]]))
    return _voronoi_starts(y, np.array(values[::-1], dtype=np.int64))


def _voronoi_starts(y: FloatArray, values: IntArray) -> IntArray:
    """First support index of each value's cell: labels go to the nearest value (ties to the lower)."""
    mids = 0.5 * (y[values[:-1]] + y[values[1:]])
    bounds = np.searchsorted(y, mids, side="right")
    bounds = np.clip(bounds, values[:-1] + 1, values[1:])
    return np.concatenate([[0], bounds]).astype(np.int64)
