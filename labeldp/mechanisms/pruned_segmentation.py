"""One Dinkelbach pass for squared and Poisson loss by branch and bound: exact, near O(k log k) in practice.

A pass computes ``best[i] = min_{r<i} f_i(r) − λ`` with ``f_i(r) = best[r] + c(r, i)``. The O(k²) scan
evaluates every ``r``; here the left ends ``r`` are the leaves of a binary tree, and a node (a block
``[lo, hi]`` of left ends) is skipped when a lower bound on ``f_i`` over the whole block exceeds the
best ``f_i(r)`` found so far. Two bounds, each valid in exact arithmetic (docs/math.md §3.2):

1. **Monotone bound** ``best[lo] + c(hi, i)``: a longer interval costs more (its labels get more
   weight, and the shifted losses are non-negative), and ``best`` is non-decreasing in ``r`` when
   ``λ`` is at most the cheapest interval's cost — true for every reward Dinkelbach passes (it starts
   at the single bin's ratio, ``min_v f₀(v)``, and only decreases). Tight far to the right.
2. **Concave bound**: both costs are ``c(r, i) = C + g·(R_i − R_r) + φ(S₁, W)`` with prefix sums
   ``R`` (squared labels, or the Poisson shift), ``W = P_k + g(P_i − P_r)`` and ``S₁ = S_k + g(S_i − S_r)``,
   and ``φ(s, w) = −s²/w`` or ``s − s·log(s/w)``, both *jointly concave*. Moving φ's tangent plane at
   ``(S_k, P_k)`` into the prefix sums leaves a concave remainder φ̃ of second order, so
   ``f_i(r) >= min_block(best[r] − g·R̃_r) + C + g·R̃_i + min φ̃`` over a box that contains every
   ``(S₁, W)`` of the block, and a concave function's minimum over a box is at a corner. The box is
   spanned in the coordinates ``(S₁ − μW, W)`` (μ the prior mean), where the block's spread is a
   centred sum, small. Tight when the interval gains are second order, as at small ε.

A node is skipped only when its bound beats the incumbent by more than 10⁻¹¹ of the magnitudes
involved (far above the rounding error of the prefix sums), so the pass returns what the scan
returns up to exact ties. The worst case stays O(k²) (nothing is pruned); measured, it evaluates
40–670 intervals per support point instead of k/2 on real-shaped priors, and up to ~35,000 on
contrived near-flat ones (BENCHMARKS.md).

Empty cells must be removed before a pass (``optimize`` does): a run of zero-mass cells makes
``f_i`` exactly flat over it, and the search cannot prune ties.

With the optional ``numba`` (extra ``fast``) the kernel is compiled once per process (~1–2 s);
without it the scan is faster than this kernel in plain Python, and ``optimize`` uses the scan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from types import FunctionType
from typing import Any

import numpy as np

from labeldp.mechanisms._types import FloatArray, IntArray
from labeldp.mechanisms.interval_costs import PoissonCosts, SquaredCosts

# below this support size the O(k²) scan finishes before numba would have compiled the kernel
COMPILE_FROM = 3_000
_LEAF = 16  # blocks this small are scanned
_TOL = 1e-11  # relative slack before a bound may prune


def _phi(poisson: bool, s: float, w: float) -> float:
    """φ(s, w): the non-additive part of an interval cost (``s`` weighted label sum, ``w`` weight)."""
    if poisson:
        return s - s * math.log(s / w) if s != 0.0 else 0.0
    return -(s * (s / w))


def _cost(poisson: bool, P: Any, S: Any, A: Any, g: float, k: int, r: int, i: int) -> float:
    """``c(r, i)``, evaluated in the same order of operations as ``interval_costs``."""
    W = P[k] + g * (P[i] - P[r])
    S1 = S[k] + g * (S[i] - S[r])
    if poisson:
        c = _phi(True, S1, W) - (A[k] + g * (A[i] - A[r]))
    else:
        c = (A[k] + g * (A[i] - A[r])) + _phi(False, S1, W)
    return c if c > 0.0 else 0.0


def _slack(incumbent: float, A: Any, lin: Any, g: float, i: int) -> float:
    """How far a bound must exceed the incumbent to prune: 10⁻¹¹ of the largest terms summed."""
    k = A.shape[0] - 1
    return _TOL * (abs(incumbent) + abs(A[k]) + g * (abs(A[i]) + lin[3]))


def _bound(
    poisson: bool,
    P: Any,
    S: Any,
    A: Any,
    RT: Any,
    lin: Any,
    g: float,
    monotone: bool,
    best: Any,
    lo: int,
    hi: int,
    i: int,
    u_block: float,
    centred_lo: float,
    centred_hi: float,
) -> float:
    """A lower bound on ``best[r] + c(r, i)`` for every ``r`` in ``[lo, hi]``: the larger of the
    monotone bound (when ``monotone``) and the concave one. ``u_block`` is the block's least
    ``best[r] − g·R̃_r``, ``centred_lo``/``centred_hi`` its extrema of ``S_r − μ·P_r``."""
    a, b, mu = lin[0], lin[1], lin[2]
    k = P.shape[0] - 1
    bound = -math.inf
    if monotone:
        bound = best[lo] + _cost(poisson, P, S, A, g, k, hi, i)
    w_lo = P[k] + g * (P[i] - P[hi])
    w_hi = P[k] + g * (P[i] - P[lo])
    t0 = S[k] - mu * P[k]
    t_lo = t0 + g * ((S[i] - mu * P[i]) - centred_hi)
    t_hi = t0 + g * ((S[i] - mu * P[i]) - centred_lo)
    corner = math.inf
    for c in range(4):
        w = w_lo if c & 1 else w_hi
        s = (t_lo if c & 2 else t_hi) + mu * w
        if poisson and s <= 0.0:
            return bound  # a corner outside φ's domain: no concave bound for this block
        corner = min(corner, _phi(poisson, s, w) - a * (s - S[k]) - b * (w - P[k]))
    sign = -1.0 if poisson else 1.0
    return max(bound, u_block + sign * A[k] + g * RT[i] + corner)


def _pruned_pass(
    poisson: bool,
    P: Any,
    S: Any,
    A: Any,
    RT: Any,
    lin: Any,
    g: float,
    lam: float,
    monotone: bool,
    centred_min: Any,
    centred_max: Any,
    size: int,
    u_min: Any,
    best: Any,
    arg: Any,
    stack: Any,
) -> int:
    """Fill ``best`` and ``arg`` (the best left end of the last bin) for every right end; return the
    number of interval costs evaluated. ``lin`` = (a, b, μ, the largest ``|A|`` or ``|R̃|``): φ's
    tangent plane ``a·s + b·w``, the centring mean and the tolerance scale. The trees (node ``n``'s
    children ``2n``, ``2n+1``, leaves from ``size``) hold block minima of ``best[r] − g·R̃_r`` (filled
    as the pass goes; +inf for left ends not yet known) and block extrema of ``S − μP``."""
    k = P.shape[0] - 1
    for n in range(2 * size):
        u_min[n] = math.inf
    best[0] = 0.0
    evaluated = 0
    previous = 0
    for i in range(1, k + 1):
        n = size + i - 1  # left end i − 1 becomes available
        u_min[n] = best[i - 1] - g * RT[i - 1]
        n //= 2
        while n >= 1:
            u_min[n] = min(u_min[2 * n], u_min[2 * n + 1])
            n //= 2
        arg_i = previous
        incumbent = best[arg_i] + _cost(poisson, P, S, A, g, k, arg_i, i)
        evaluated += 1
        stack[0], stack[1], stack[2] = 1, 0, size
        top = 3
        while top > 0:
            top -= 3
            node, lo, length = stack[top], stack[top + 1], stack[top + 2]
            if lo >= i:
                continue
            hi = min(lo + length - 1, i - 1)
            tol = _slack(incumbent, A, lin, g, i)
            bound = _bound(
                poisson, P, S, A, RT, lin, g, monotone, best, lo, hi, i,
                u_min[node], centred_min[node], centred_max[node],
            )  # fmt: skip
            evaluated += monotone
            if bound > incumbent + tol:
                continue
            if length <= _LEAF:
                for r in range(lo, hi + 1):
                    value = best[r] + _cost(poisson, P, S, A, g, k, r, i)
                    if value < incumbent or (value == incumbent and r < arg_i):
                        incumbent, arg_i = value, r
                evaluated += hi - lo + 1
                continue
            half = length // 2
            # the child holding the incumbent is searched first (pushed last)
            later, sooner = (2 * node + 1, 2 * node) if arg_i < lo + half else (2 * node, 2 * node + 1)
            stack[top], stack[top + 1], stack[top + 2] = later, lo + half * (later - 2 * node), half
            stack[top + 3], stack[top + 4], stack[top + 5] = sooner, lo + half * (sooner - 2 * node), half
            top += 6
        best[i] = incumbent - lam
        arg[i] = arg_i
        previous = arg_i
    return evaluated


@cache
def _compile() -> Callable[..., int] | None:
    """The kernel compiled by numba (once per process), or None without numba."""
    try:
        import numba
    except ImportError:
        return None

    def jit(fn: Callable[..., Any], **compiled_helpers: object) -> Any:
        # the same code object, resolving its helpers to their compiled twins
        assert isinstance(fn, FunctionType)
        twin = FunctionType(fn.__code__, dict(fn.__globals__, **compiled_helpers))
        # helpers are inlined into the kernel at numba's level: about twice as fast as calls
        return numba.njit(nogil=True, inline="never" if fn is _pruned_pass else "always")(twin)

    phi = jit(_phi)
    cost = jit(_cost, _phi=phi)
    bound = jit(_bound, _phi=phi, _cost=cost)
    slack = jit(_slack)
    compiled: Callable[..., int] = jit(_pruned_pass, _cost=cost, _bound=bound, _slack=slack)
    return compiled


def available(k: int) -> bool:
    """Whether the compiled pass is worth using for a support of ``k`` points."""
    return k >= COMPILE_FROM and _compile() is not None


def _tree(values: FloatArray, size: int, reduce: np.ufunc, fill: float) -> FloatArray:
    tree = np.full(2 * size, fill)
    tree[size : size + values.size] = values
    level = size
    while level > 1:
        tree[level // 2 : level] = reduce(tree[level : 2 * level : 2], tree[level + 1 : 2 * level : 2])
        level //= 2
    return tree


class PrunedSegmenter:
    """The per-prior state of the pruned pass (prefix sums, trees): built once, reused by every pass."""

    def __init__(self, costs: SquaredCosts | PoissonCosts) -> None:
        self.costs = costs
        k = costs.k
        self.poisson = isinstance(costs, PoissonCosts)
        P, S = costs.P, costs.S
        self.A = costs.G if isinstance(costs, PoissonCosts) else costs.Q
        R = -self.A if self.poisson else self.A
        mu = float(S[k] / P[k])
        if self.poisson:  # φ's gradient at (S_k, P_k); without a positive mean, any plane is valid
            a, b = (-math.log(mu), mu) if mu > 0 else (0.0, 0.0)
        else:
            a, b = -2.0 * mu, mu * mu
        self.RT = R + a * S + b * P
        self.lin = np.array([a, b, mu, float(max(np.abs(self.A).max(), np.abs(self.RT).max()))])
        self.size = 1 << max(k - 1, 1).bit_length()
        centred = (S - mu * P)[:k]
        self.centred_min = _tree(centred, self.size, np.minimum, math.inf)
        self.centred_max = _tree(centred, self.size, np.maximum, -math.inf)
        self.floor = costs.cost(0, k) / (1.0 + costs.g)  # min_v f₀(v): no interval costs less
        self.evaluated = 0

    def __call__(self, reward: float, *, compiled: bool = True) -> IntArray:
        """Bin starts of a partition minimizing ``Σ_bins (c(bin) − reward)``."""
        costs, k = self.costs, self.costs.k
        kernel: Callable[..., int] = _pruned_pass
        if compiled:
            kernel_or_none = _compile()
            if kernel_or_none is None:
                raise RuntimeError("numba is not installed (pip install 'labeldp[fast]')")
            kernel = kernel_or_none
        best, arg = np.empty(k + 1), np.zeros(k + 1, dtype=np.int64)
        scratch = np.empty(2 * self.size), np.empty(3 * 2 * (self.size.bit_length() + 2), dtype=np.int64)
        # Dinkelbach's first reward is this floor up to rounding; a 1e-12 excess is inside the slack
        monotone = reward <= self.floor * (1.0 + 1e-12)
        self.evaluated = kernel(
            self.poisson, costs.P, costs.S, self.A, self.RT, self.lin, costs.g, float(reward), monotone,
            self.centred_min, self.centred_max, self.size, scratch[0], best, arg, scratch[1],
        )  # fmt: skip
        return bin_starts(arg)


def bin_starts(arg: Sequence[int] | IntArray) -> IntArray:
    """The partition a segmentation DP chose, read back from ``arg[i]`` (the start of the last bin of
    the best partition of the first ``i`` cells)."""
    starts = []
    i = len(arg) - 1
    while i > 0:
        i = int(arg[i])
        starts.append(i)
    return np.array(starts[::-1], dtype=np.int64)
