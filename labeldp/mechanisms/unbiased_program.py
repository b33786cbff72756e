"""The optimal unbiased randomizer for a prior: a linear program over a public output grid.

Among ε-DP randomizers ``M(z | y)`` over a finite output set ``O`` whose output is an unbiased
estimate of the label (``Σ_z z·M(z | y) = y`` for every support point ``y``), find the one of least
variance under the prior, ``Σ_y p_y Σ_z M(z | y)(z − y)²`` (docs/math.md §15). It is a linear program,
but a plain one has ``k·|O|`` variables and as many ε-DP rows, far too many for a solver at ``k = 201``.
Two facts proven in §15 make it small:

1. Write ``c_z = min_y M(z | y)``; ε-DP is ``c_z ≤ M(z | y) ≤ e^ε·c_z``. Every such column is a
   non-negative combination of *patterns* ``θ·(1 + (e^ε − 1)·σ_y)`` with ``σ ∈ {0, 1}^k``, so the
   program is a **master** over columns ``(z, σ)`` with only ``2k`` equality rows (each ``y``'s
   mass and mean), solved by HiGHS. A column helps exactly when its reduced cost
   ``Σ_y φ(p_y (z − y)² − α_y − β_y z)`` is negative (``φ(r) = r`` for ``r ≥ 0``, ``e^ε·r`` below;
   ``α, β`` the master's duals) and the best ``σ`` for a given ``z`` is the sign pattern, so pricing
   is one vectorized pass over the grid. When no grid point prices out, the master's optimum is the
   optimum over all of ``O`` (its dual is feasible for the whole program).
2. Column generation from scratch tails off; started from the columns that a rough **interior-point**
   solution of the full program uses, it needs a handful of rounds. The interior-point method's
   Newton systems collapse to ``2k × 2k``: the ε-DP couplings of one output form an arrow matrix,
   inverted in closed form, so an iteration costs ``O(k²·|O_coarse|)`` (three matrix products).

Everything is a pure function of (support, prior, ε, grid): no labels, no state, cheap to call many
times (a feature-aware release solves one program per group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labeldp.mechanisms._types import ArrayLike, FloatArray, IntArray
from labeldp.mechanisms.losses import LossFn, resolve_loss
from labeldp.mechanisms.support import Support, as_support
from labeldp.mechanisms.unbiased import UnbiasedRandomizer, check_unbiased_loss
from labeldp.mechanisms.unbiased_interior import WarmStart, interior_point
from labeldp.mechanisms.unbiased_weights import (
    MAX_BIAS,
    MAX_UNBIASED_SUPPORT,
    UnbiasedWeights,
    check_unbiased_epsilon,
)
from labeldp.mechanisms.validation import ParameterError, finite_vector

# The output grid: GRID_POINTS evenly spaced points on [lo − R, hi + R] plus the support itself, with
# R = reach·(hi − lo)·max(2/g, 2/√g, REACH_FLOOR), g = e^ε − 1; docs/math.md §15 and BENCHMARKS.md
# ("Unbiased randomizer: how fine the output grid must be") measure both choices.
GRID_POINTS = 512
# The reach never falls below this share of the range: at large ε a skewed prior's optimum still puts a
# little mass about half a range out (the diamond prices at ε = 8: 0.56 above, 0.23 below; measured in
# BENCHMARKS.md), and each widening below is a whole new program.
REACH_FLOOR = 0.75
_COARSE_POINTS = 2048  # the interior-point warm start's grid (a subset of the output grid)
_MAX_ROUNDS = 60  # column-generation rounds (a handful is typical from the warm start)
_PRICE_TOL = 1e-12  # a column enters when its reduced cost is below −_PRICE_TOL·(1 + |objective|)
_CERTIFIED_GAP = 1e-10  # the interior point's answer stands when its certificate is this tight
_CERTIFIED_BIAS = 1e-12  # ... and its rows' means are this near their labels (labels scaled to [−1, 1])
_HIGHS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10, "presolve": False}


# Every support point's variance counts at least this much: the program optimizes for the noisy prior
# mixed with this share of the uniform one (a public rule), so a point the noisy prior gives no mass —
# or a prior with all its mass on one point — still gets a randomizer that serves it.
PRIOR_FLOOR = 1e-3
_WIDENINGS = 3  # how often the grid's reach doubles when the optimum uses its outermost outputs


def optimize_unbiased(
    support: Support | ArrayLike,
    prior: ArrayLike,
    epsilon: float,
    loss: str | LossFn = "squared",
    *,
    grid_points: int = GRID_POINTS,
) -> UnbiasedRandomizer:
    """The least-variance unbiased ε-DP randomizer for ``prior`` on the public ``support``.

    The program runs on the public output grid (``output_grid``) for the prior floored by
    ``PRIOR_FLOOR``; if its optimum puts mass on the grid's outermost points, the grid reaches twice
    as far and the program runs again (a function of the noisy prior: post-processing). The optimum
    becomes the exact integer randomizer (``UnbiasedWeights.from_base``)."""
    sup = as_support(support)
    loss_spec = resolve_loss(loss)
    check_unbiased_loss(loss_spec.name)
    eps = check_unbiased_epsilon(epsilon)
    p = finite_vector(prior, "prior")
    if p.size != sup.k:
        raise ParameterError("prior must have one mass per support point", "prior")
    if np.any(p < 0) or not p.sum() > 0:
        raise ParameterError("prior must be non-negative with a positive sum", "prior")
    if sup.k < 2:
        raise ParameterError(
            "the unbiased randomizer needs a support of at least two points (one point is released "
            "exactly by every mechanism)",
            "support",
        )
    floored = (1.0 - PRIOR_FLOOR) * p / p.sum() + PRIOR_FLOOR / sup.k
    reach = 1.0
    for _ in range(_WIDENINGS + 1):
        grid = output_grid(sup.values, eps, grid_points, reach=reach)
        solution = solve_unbiased(sup.values, floored, eps, grid)
        used = solution.outputs
        if used[0] > 0 and used[-1] < grid.size - 1:
            break
        reach *= 2.0
    weights = UnbiasedWeights.from_base(eps, grid[used], solution.base[used], sup.values)
    bias = float(np.abs(weights.means() - sup.values).max())
    if bias > MAX_BIAS * (sup.hi - sup.lo):  # pragma: no cover - from_base centres every window
        raise ArithmeticError(
            f"the unbiased randomizer came out biased by {bias!r}; please report this prior"
        )
    return UnbiasedRandomizer(sup, weights, loss_spec)


@dataclass(frozen=True)
class UnbiasedSolution:
    """The program's optimum on a grid: ``base[j] = c_{z_j} = min_y M(z_j | y)`` (the rest of the
    mechanism follows from it, ``labeldp.mechanisms.unbiased_weights``), its variance under the
    prior, and a lower bound on every unbiased ε-DP randomizer's variance over the grid (the
    master's Lagrangian bound: ``variance − lower_bound`` is the certificate of optimality)."""

    grid: FloatArray
    base: FloatArray
    variance: float
    lower_bound: float
    rounds: int

    @property
    def outputs(self) -> IntArray:
        """Indices of the grid points the optimum uses."""
        return np.flatnonzero(self.base > 0)


def grid_reach(lo: float, hi: float, epsilon: float, reach: float = 1.0) -> float:
    """How far beyond ``[lo, hi]`` the output grid extends (on each side)."""
    g = math.expm1(epsilon)
    return reach * (hi - lo) * max(2.0 / g, 2.0 / math.sqrt(g), REACH_FLOOR)


def output_grid(
    support: ArrayLike, epsilon: float, points: int = GRID_POINTS, *, reach: float = 1.0
) -> FloatArray:
    """The public output grid ``O``: ``points`` evenly spaced outputs on ``[lo − R, hi + R]`` and the
    support points themselves (the exact outputs that large ε wants). A function of public parameters
    only: the support's bounds, ε and the grid's size."""
    values = finite_vector(support, "support")
    eps = check_unbiased_epsilon(epsilon)
    if int(points) != points or points < 2:
        raise ParameterError(f"points must be an integer >= 2, got {points!r}", "points")
    lo, hi = float(values.min()), float(values.max())
    if not hi > lo:
        raise ParameterError("the unbiased randomizer needs a support of at least two points", "support")
    r = grid_reach(lo, hi, eps, reach)
    return np.union1d(np.linspace(lo - r, hi + r, int(points)), values)


def solve_unbiased(values: ArrayLike, prior: ArrayLike, epsilon: float, grid: ArrayLike) -> UnbiasedSolution:
    """The least-variance unbiased ε-DP randomizer over ``grid`` for ``prior`` on ``values``."""
    y, p, eps, z = _checked(values, prior, epsilon, grid)
    center, scale = (y[0] + y[-1]) / 2, (y[-1] - y[0]) / 2
    ys, zs = (y - center) / scale, (z - center) / scale
    g = math.expm1(eps)
    coarse = _coarse(zs, ys)
    warm = interior_point(ys, p, g, zs[coarse])
    columns = _Columns(ys, p, g)
    if warm is not None and coarse.size == zs.size:
        base = _pruned(warm.base)
        variance = canonical_variance(zs, base, ys, p, g)
        _, rc = columns.reduced(zs, *warm.duals)
        lower = warm.dual + min(float(rc.min()), 0.0)
        # |·|: a variance below the bound means the pruned base's rows miss their means a little
        # (the interior point is only near-feasible); the master then makes it exact. The variance can
        # sit within the gap while the lowest row misses its mean by 1.25·10⁻⁹ of the range (a noisy
        # weeks prior at ε₂ = 1.88, tests/mechanisms/test_unbiased.py): its bias is checked too
        if (
            abs(variance - lower) <= _CERTIFIED_GAP * abs(variance)
            and canonical_bias(zs, base, ys, g) <= _CERTIFIED_BIAS
        ):
            return UnbiasedSolution(z, base, variance * scale**2, lower * scale**2, 0)
    columns.add_feasible_start(zs)
    if warm is not None:
        columns.add_warm(zs, coarse, warm)
        columns.add_priced(zs, warm.duals, keep=2 * y.size + 16)
    objective, theta, lower, rounds = _column_generation(columns, zs)
    base = np.zeros(z.size)
    np.add.at(base, columns.output_index, theta)
    base[base < 0] = 0.0
    return UnbiasedSolution(z, base, objective * scale**2, lower * scale**2, rounds)


def _pruned(base: FloatArray) -> FloatArray:
    """An interior point's base without the masses it only keeps to stay interior."""
    return np.where(base > 1e-9 * base.max(), base, 0.0)


def canonical_bias(z: FloatArray, base: FloatArray, y: FloatArray, g: float) -> float:
    """The largest ``|E[output | y_i] − y_i|`` of the mechanism a base defines (``windows``)."""
    used = np.flatnonzero(base > 0)
    zu, cu = z[used], base[used]
    m = cu[None, :] * (1.0 + g * windows(zu, cu, y, g))
    return float(np.abs(m @ zu - y).max())


def canonical_variance(z: FloatArray, base: FloatArray, y: FloatArray, p: FloatArray, g: float) -> float:
    """``Σ_i p_i Σ_j M(z_j | y_i)(z_j − y_i)²`` of the mechanism a base defines (``windows``)."""
    used = np.flatnonzero(base > 0)
    zu, cu = z[used], base[used]
    m = cu[None, :] * (1.0 + g * windows(zu, cu, y, g))
    return float(p @ (m * (zu[None, :] - y[:, None]) ** 2).sum(axis=1))


def _checked(
    values: ArrayLike, prior: ArrayLike, epsilon: float, grid: ArrayLike
) -> tuple[FloatArray, FloatArray, float, FloatArray]:
    y = finite_vector(values, "values")
    p = finite_vector(prior, "prior")
    z = finite_vector(grid, "grid")
    eps = check_unbiased_epsilon(epsilon)
    if y.size != p.size:
        raise ParameterError(f"values and prior must have the same length ({y.size} != {p.size})", "prior")
    if y.size < 2:
        raise ParameterError(
            "an unbiased randomizer needs a support of at least two points (one point is released exactly "
            "by any mechanism)",
            "support",
        )
    if y.size > MAX_UNBIASED_SUPPORT:
        raise ParameterError(
            f"the unbiased randomizer's program takes supports of at most {MAX_UNBIASED_SUPPORT} points, "
            f"got {y.size}",
            "support",
        )
    if np.any(np.diff(y) <= 0) or np.any(np.diff(z) <= 0):
        raise ParameterError("values and grid must be strictly increasing", "values")
    if np.any(p < 0) or not p.sum() > 0:
        raise ParameterError("prior must be non-negative with a positive sum", "prior")
    span = (y[-1] - y[0]) / math.expm1(eps)
    if z[0] > y[0] - span or z[-1] < y[-1] + span:
        raise ParameterError(
            "the grid must reach (hi − lo)/(e^ε − 1) beyond the support on both sides (where the "
            "two-output unbiased randomizer lives)",
            "grid",
        )
    return y, p / p.sum(), eps, z


def _coarse(zs: FloatArray, ys: FloatArray) -> IntArray:
    """The warm start's grid: every s-th output, the two ends, and the output nearest each label."""
    step = max(1, zs.size // _COARSE_POINTS)
    picks = np.arange(0, zs.size, step)
    near = np.clip(np.searchsorted(zs, ys), 0, zs.size - 1)
    return np.unique(np.concatenate([picks, [zs.size - 1], near]))


def windows(z: FloatArray, base: FloatArray, y: FloatArray, g: float) -> FloatArray:
    """Each row's best window for a base ``c`` on sorted outputs ``z``: ``t[i, j] ∈ [0, 1]`` with
    ``M(z_j | y_i) = c_j (1 + g·t[i, j])`` (docs/math.md §15). Every row's window holds the same
    ``c``-mass ``w = (1 − C)/g`` and is the slice ``[u_i, u_i + w]`` of the cumulative ``c``-mass whose
    first moment is ``(y_i − Σ z c)/g``; the slice's moment increases with ``u_i``, which bisection
    finds. Rows whose mean the slices cannot reach take the nearest end (the caller's tolerance)."""
    total = float(base.sum())
    w = (1.0 - total) / g
    cum = np.concatenate([[0.0], np.cumsum(base)])
    moment = np.concatenate([[0.0], np.cumsum(base * z)])

    def first_moment(s: FloatArray) -> FloatArray:  # ∫_0^s Z(t) dt, Z the quantile function of c
        j = np.clip(np.searchsorted(cum, s, side="right") - 1, 0, z.size - 1)
        return moment[j] + (s - cum[j]) * z[j]

    target = (y - float(base @ z)) / g
    lo_u, hi_u = np.zeros(y.size), np.full(y.size, max(total - w, 0.0))
    for _ in range(64):
        mid = (lo_u + hi_u) / 2
        below = first_moment(mid + w) - first_moment(mid) < target
        lo_u, hi_u = np.where(below, mid, lo_u), np.where(below, hi_u, mid)
    u = (lo_u + hi_u) / 2
    start, end = u[:, None], u[:, None] + w
    overlap = np.clip(np.minimum(end, cum[None, 1:]) - np.maximum(start, cum[None, :-1]), 0.0, None)
    return np.where(base[None, :] > 0, overlap / np.where(base > 0, base, 1.0)[None, :], 0.0)


# -- the master: columns (z, σ) over 2k equality rows ------------------------------------------------
class _Columns:
    """Columns of the master, ``M(z | y_i) += θ·(1 + g·σ_i)``, stored as (output index, σ)."""

    def __init__(self, ys: FloatArray, p: FloatArray, g: float) -> None:
        self.ys, self.p, self.g = ys, p, g
        self.output_index = np.empty(0, dtype=np.int64)
        self.patterns = np.empty((0, ys.size), dtype=bool)
        self._seen: set[bytes] = set()

    def add(self, index: IntArray, patterns: np.ndarray) -> int:
        fresh_idx, fresh = [], []
        for j, s in zip(index.tolist(), patterns, strict=True):
            key = int(j).to_bytes(8, "little") + np.packbits(s).tobytes()
            if key not in self._seen:
                self._seen.add(key)
                fresh_idx.append(j)
                fresh.append(s)
        if fresh:
            self.output_index = np.concatenate([self.output_index, np.asarray(fresh_idx, dtype=np.int64)])
            self.patterns = np.vstack([self.patterns, np.asarray(fresh, dtype=bool)])
        return len(fresh)

    def add_feasible_start(self, zs: FloatArray) -> None:
        """The two-output randomizer on the grid's ends, as columns: always feasible (``_checked``
        makes the grid reach far enough), so the master never needs artificial variables. Output
        ``b`` (the top) has ``M(b | y) = (y − a)/(b − a)``, increasing in ``y``: a base column and one
        threshold pattern ``σ = [y ≥ y_t]`` per step; output ``a`` mirrors it."""
        k = self.ys.size
        steps = np.triu(np.ones((k, k), dtype=bool))[1:]  # σ_t = [i >= t], t = 1..k-1
        patterns = np.vstack([np.zeros((1, k), dtype=bool), steps])
        top, bottom = zs.size - 1, 0
        self.add(np.full(k, top), patterns)
        self.add(np.full(k, bottom), patterns[:, ::-1])

    def add_warm(self, zs: FloatArray, coarse: IntArray, warm: WarmStart) -> None:
        """The columns of the canonical mechanism of the warm start's base (every row's best window
        for it, ``windows``): each output's column ``c_j(1 + g·t_·j)`` split at its distinct shares
        ``t`` into threshold patterns (exactly, so the master starts at that mechanism)."""
        base = np.where(warm.base > 1e-9 * warm.base.max(), warm.base, 0.0)
        used = np.flatnonzero(base)
        share = windows(zs[coarse][used], base[used], self.ys, self.g)  # k × used
        for col, j in enumerate(coarse[used].tolist()):
            levels = np.unique(share[:, col])
            levels = levels[levels > 1e-12]
            patterns = share[None, :, col] >= levels[:, None] - 1e-12
            self.add(
                np.full(levels.size + 1, j), np.vstack([np.zeros((1, self.ys.size), dtype=bool), patterns])
            )

    def add_priced(self, zs: FloatArray, duals: tuple[FloatArray, FloatArray], keep: int) -> None:
        """The ``keep`` grid points of least reduced cost under ``duals``, each with its sign pattern."""
        r, rc = self.reduced(zs, *duals)
        best = np.argsort(rc, kind="stable")[:keep]
        self.add(best, r[best] < 0)

    def reduced(self, zs: FloatArray, alpha: FloatArray, beta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """``r[j, i] = p_i (z_j − y_i)² − α_i − β_i z_j`` and each grid point's reduced cost
        ``Σ_i φ(r[j, i])`` (its best pattern's)."""
        r = (
            self.p[None, :] * (zs[:, None] - self.ys[None, :]) ** 2
            - alpha[None, :]
            - beta[None, :] * zs[:, None]
        )
        return r, np.where(r < 0, (1.0 + self.g) * r, r).sum(axis=1)

    def matrices(self, zs: FloatArray) -> tuple[FloatArray, FloatArray]:
        weight = 1.0 + self.g * self.patterns  # columns × k
        z = zs[self.output_index]
        cost = (weight * self.p[None, :] * (z[:, None] - self.ys[None, :]) ** 2).sum(axis=1)
        return cost, np.vstack([weight.T, (weight * z[:, None]).T])


def _column_generation(columns: _Columns, zs: FloatArray) -> tuple[float, FloatArray, float, int]:
    from scipy.optimize import linprog  # here: at the top it slows every service start

    k = columns.ys.size
    b = np.concatenate([np.ones(k), columns.ys])
    for rounds in range(1, _MAX_ROUNDS + 1):
        cost, a_eq = columns.matrices(zs)
        result = linprog(cost, A_eq=a_eq, b_eq=b, bounds=(0, None), method="highs-ds", options=_HIGHS)
        if result.status != 0:  # pragma: no cover - the start columns are feasible
            raise ArithmeticError(f"the unbiased randomizer's master failed: {result.message}")
        objective = float(result.fun)
        duals = (result.eqlin.marginals[:k], result.eqlin.marginals[k:])
        r, rc = columns.reduced(zs, *duals)
        least = float(rc.min())

        lower = objective + min(least, 0.0)  # Σθ ≤ 1 for every feasible master point
        if least >= -_PRICE_TOL * (1.0 + abs(objective)):
            return objective, np.asarray(result.x), lower, rounds
        entering = np.flatnonzero(rc < -_PRICE_TOL * (1.0 + abs(objective)))
        entering = entering[np.argsort(rc[entering], kind="stable")[: 2 * k + 8]]
        if columns.add(entering, r[entering] < 0) == 0:  # pragma: no cover - degenerate duals
            return objective, np.asarray(result.x), lower, rounds
    raise ArithmeticError("the unbiased randomizer's column generation did not converge")  # pragma: no cover
